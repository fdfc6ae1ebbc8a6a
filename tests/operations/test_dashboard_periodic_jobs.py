"""The periodic jobs the console relies on (Celery beat) do their work when run as jobs."""

import pytest

from apps.orchestration import tasks as orchestration_jobs
from apps.orchestration.models import Backend, CapacitySample, Node
from apps.orders import tasks as order_jobs
from apps.orders.models import IdlePolicy
from tests.operations.conftest import devices_of

pytestmark = pytest.mark.django_db


def test_probe_backends_reads_every_enabled_backend(console):
    Backend.objects.create(park=console.park, name="off", driver="simulator", is_enabled=False)
    assert orchestration_jobs.probe_backends.delay().get() == 1
    assert not Node.objects.filter(pool=console.pool, last_seen_at__isnull=True).exists()


def test_sample_capacity_writes_one_sample_per_pool(console):
    assert orchestration_jobs.sample_capacity.delay().get() == 1
    assert CapacitySample.objects.get().accelerators_total == 16


def test_enforce_idle_policies_stops_idle_hosts(console, running, telemetry, commit):
    host = running()
    telemetry({host.node.hostname: {str(i): 0 for i in devices_of(host)}}, idle_for=200)
    IdlePolicy.objects.create(park=console.park, threshold_minutes=60, auto_stop=True)
    with commit():
        assert order_jobs.enforce_idle_policies.delay().get() == 1
    host.refresh_from_db()
    assert host.state == "stopped"


def test_a_notice_for_a_gone_instance_sends_nothing():
    assert order_jobs.send_instance_notice.delay(987654, "idle").get() == 0
    with pytest.raises(ValueError):
        order_jobs.send_instance_notice(1, "spam")
