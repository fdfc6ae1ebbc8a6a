"""Scheduled stop (定时关机) on a real host agent: the beat job, run every 30 s as beat runs it
(`stop-scheduled-hosts`), on the real clock, stops the host within a minute of its time, and
not before it."""

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.core.models import AuditEvent
from apps.orders import expiry
from apps.orders.models import Instance, InstanceState
from apps.orders.tasks import stop_scheduled_hosts
from tests.agent_server import ssh_answers
from tests.orders.real_agent_hosts import real_agent as real_agent
from tests.orders.real_agent_hosts import wait_until

pytestmark = [pytest.mark.containers, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

BEAT_EVERY_S = settings.CELERY_BEAT_SCHEDULE["stop-scheduled-hosts"]["schedule"]


def test_a_scheduled_stop_happens_within_a_minute_of_its_time(real_agent):
    host = real_agent.order("bedtime")
    wait_until(lambda: ssh_answers(host.access, real_agent.key).returncode == 0, what="SSH")
    stop_at = timezone.now() + timedelta(seconds=20)
    expiry.schedule_stop(instance=host, actor=real_agent.park.owner, at=stop_at)

    ticks = []  # (when the beat ran, the host's state after it)
    next_tick = time.monotonic()
    while True:
        time.sleep(max(0.0, next_tick - time.monotonic()))
        ran_at = timezone.now()
        stop_scheduled_hosts.delay()  # eager: the stop is requested and followed here
        ticks.append((ran_at, Instance.objects.get(pk=host.pk).state))
        if ticks[-1][1] == InstanceState.STOPPED or ran_at > stop_at + timedelta(seconds=90):
            break
        next_tick += BEAT_EVERY_S

    # The beat that ran before its time left it running; the next one stopped it.
    assert ticks[0][0] < stop_at and ticks[0][1] == InstanceState.RUNNING, ticks
    host = Instance.objects.get(pk=host.pk)
    assert host.state == InstanceState.STOPPED, ticks
    assert stop_at <= host.stopped_at <= stop_at + timedelta(seconds=60), (stop_at, ticks)
    assert host.stop_at is None  # done
    assert ssh_answers(host.access, real_agent.key).returncode != 0  # really down
    event = AuditEvent.objects.get(action="instance.scheduled_stop", object_id=str(host.pk))
    assert event.data["stop_at"] == stop_at.isoformat()
