"""GPU-less start (无卡模式开机): a stopped host runs on its own node with no card and a small
share, at the region's no-card price, and a normal start later takes its cards again."""

from decimal import Decimal

import pytest

from apps.billing.models import Meter, MeterKind
from apps.core.errors import DomainError, InvalidTransition
from apps.core.models import AuditEvent
from apps.orchestration.models import Allocation
from apps.orchestration.services import NoCapacity
from apps.orders.models import Instance, InstanceState, OrderState
from apps.orders.operations import request_operation
from apps.orders.without_cards import NO_CARD_RAM_GB, NO_CARD_VCPU
from apps.quotas.models import QuotaResource
from apps.webhooks.models import WebhookDelivery
from tests.factories import PriceFactory, WebhookEndpointFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

NO_CARD_HOUR = 80


@pytest.fixture
def no_card_price(world):
    return PriceFactory(region=world.region, no_card=True, amount_minor=NO_CARD_HOUR)


@pytest.fixture
def stopped(running_host, operate):
    def make(accelerators=1, **fields) -> Instance:
        instance = running_host(accelerators, **fields)
        operate(instance, "stop")
        return Instance.objects.get(pk=instance.pk)

    return make


def allocation_of(instance) -> Allocation | None:
    return Allocation.objects.filter(workload__instance=instance, released_at__isnull=True).first()


def open_compute_meter(instance) -> Meter:
    return Meter.objects.get(
        workload__instance=instance, kind=MeterKind.COMPUTE, ended_at__isnull=True
    )


def test_a_gpu_less_start_holds_no_card_and_pays_the_no_card_price(
    world, no_card_price, stopped, operate, owner
):
    instance = stopped(2)
    node = instance.node

    order = operate(instance, "start", without_cards=True)

    assert order.state == OrderState.DONE
    assert order.parameters == {"without_cards": True, "no_card_hourly_minor": NO_CARD_HOUR}
    instance = Instance.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.RUNNING
    assert instance.without_cards
    allocation = allocation_of(instance)
    assert allocation.node == node  # its disks are there
    assert (allocation.vcpu, allocation.ram_gb) == (NO_CARD_VCPU, NO_CARD_RAM_GB)
    assert allocation.accelerators.count() == 0
    assert world.free_accelerators() == 16
    meter = open_compute_meter(instance)
    assert meter.hourly_minor == Decimal(NO_CARD_HOUR)
    assert meter.compute_units == 0
    submitted = AuditEvent.objects.get(action="order.submitted", object_id=str(order.pk))
    assert submitted.actor == owner and submitted.data["without_cards"] is True


def test_a_normal_start_afterwards_has_the_cards_and_the_flavor_price_again(
    world, no_card_price, stopped, operate
):
    instance = stopped(2)
    operate(instance, "start", without_cards=True)
    operate(instance, "stop")
    assert not Instance.objects.get(pk=instance.pk).without_cards

    operate(instance, "start")

    instance = Instance.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.RUNNING and not instance.without_cards
    assert allocation_of(instance).accelerators.count() == 2
    assert open_compute_meter(instance).hourly_minor == Decimal(instance.rates["flavor_hour"])


def test_a_normal_start_is_refused_while_its_cards_are_taken(
    world, no_card_price, stopped, running_host, operate, owner
):
    world.set_limit(QuotaResource.ACCELERATORS, 24)
    instance = running_host(8, name="paused")
    running_host(8, name="filler")  # the other node is full
    operate(instance, "stop")
    operate(instance, "start", without_cards=True)
    taker = running_host(8, name="taker")  # its cards went to other work meanwhile
    assert Instance.objects.get(pk=taker.pk).node_id == instance.node_id
    operate(instance, "stop")

    with pytest.raises(NoCapacity) as excinfo:
        request_operation(instance=instance, actor=owner, kind="start")

    assert "it needs 8 free accelerators and 0 are free" in excinfo.value.message
    instance = Instance.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.STOPPED and allocation_of(instance) is None
    # It can still start without them.
    operate(instance, "start", without_cards=True)
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RUNNING


def test_the_start_webhook_says_it_runs_without_cards(
    world, no_card_price, stopped, operate, settings
):
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 0
    instance = stopped(1)
    endpoint = WebhookEndpointFactory(
        organization=world.organization, event_types=["instance.running"]
    )

    operate(instance, "start", without_cards=True)

    (running,) = WebhookDelivery.objects.filter(endpoint=endpoint)
    assert running.payload["data"]["instance"] == instance.pk
    assert running.payload["data"]["without_cards"] is True


def test_a_running_host_cannot_start_without_cards(world, no_card_price, running_host, owner):
    instance = running_host(1)

    with pytest.raises(InvalidTransition):
        request_operation(
            instance=instance, actor=owner, kind="start", params={"without_cards": True}
        )


def test_a_region_without_a_no_card_price_refuses_it(world, stopped, owner):
    instance = stopped(1)

    with pytest.raises(DomainError) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="start", params={"without_cards": True}
        )

    assert excinfo.value.code == "not_priced"
    assert "sets no price for hosts without cards" in excinfo.value.message
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.STOPPED


def test_a_host_without_its_cards_does_not_resize(world, no_card_price, stopped, operate, owner):
    instance = stopped(1)
    operate(instance, "start", without_cards=True)

    with pytest.raises(InvalidTransition) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="resize", params={"flavor": world.flavors[2]}
        )

    assert "start it normally to resize it" in excinfo.value.message
