"""GPU-less start (无卡模式开机) on a real host agent: the host runs with no /dev/nvidia* and is
billed at the region's no-card price; started normally afterwards, it has its card again."""

import time
from decimal import Decimal

import pytest

from apps.billing.models import MeterKind, UsageRecord
from apps.billing.tasks import meter_usage
from apps.orders.models import InstanceState
from tests.agent_server import ssh_answers
from tests.factories import PriceFactory
from tests.orders.real_agent_hosts import real_agent as real_agent
from tests.orders.real_agent_hosts import wait_until

pytestmark = [pytest.mark.containers, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Dear enough that a few seconds cost whole fen (100 a second), and nothing like the flavor's.
NO_CARD_HOUR = 360_000


def nvidia_devices(instance, key) -> list[str]:
    wait_until(lambda: ssh_answers(instance.access, key).returncode == 0, what="SSH to the host")
    listed = ssh_answers(instance.access, key, "ls /dev/ | grep nvidia || true")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_a_gpu_less_start_has_no_card_and_pays_the_no_card_price(real_agent):
    park = real_agent.park
    PriceFactory(region=park.region, no_card=True, amount_minor=NO_CARD_HOUR)
    host = real_agent.order("no-card")
    assert nvidia_devices(host, real_agent.key) == ["nvidia0"]
    host = real_agent.operate(host, "stop")
    assert host.state == InstanceState.STOPPED

    host = real_agent.operate(host, "start", without_cards=True)

    assert host.state == InstanceState.RUNNING and host.without_cards
    assert nvidia_devices(host, real_agent.key) == []
    time.sleep(2)
    meter_usage()
    records = UsageRecord.objects.filter(workload=host.workload, kind=MeterKind.COMPUTE)
    no_card = records.filter(hourly_minor=Decimal(NO_CARD_HOUR))
    assert no_card.exists() and sum(r.amount_minor for r in no_card) >= 200
    assert all(r.compute_unit_milliseconds == 0 for r in no_card)

    host = real_agent.operate(host, "stop")
    host = real_agent.operate(host, "start")

    assert host.state == InstanceState.RUNNING and not host.without_cards
    assert nvidia_devices(host, real_agent.key) == ["nvidia0"]
