"""apps.orders.funds: hosts stopped when the wallet runs out are started again as they ran."""

import pytest

from apps.orchestration.models import Allocation
from apps.orders.funds import resume_suspended, suspend_for_funds
from apps.orders.models import Instance, InstanceState, OrderKind
from tests.factories import PriceFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def test_a_host_suspended_while_it_ran_without_its_cards_resumes_without_them(
    world, running_host, operate, django_capture_on_commit_callbacks
):
    PriceFactory(region=world.region, no_card=True, amount_minor=80)
    instance = running_host(2)
    operate(instance, "stop")
    operate(instance, "start", without_cards=True)

    with django_capture_on_commit_callbacks(execute=True):
        assert suspend_for_funds(world.organization.pk) == 1
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.STOPPED
    with django_capture_on_commit_callbacks(execute=True):
        assert resume_suspended(world.organization.pk) == 1

    instance = Instance.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.RUNNING and instance.without_cards
    allocation = Allocation.objects.get(workload__instance=instance, released_at__isnull=True)
    assert allocation.accelerators.count() == 0
    start = instance.orders.filter(kind=OrderKind.START).latest("pk")
    assert start.parameters["without_cards"] is True and start.reason


def test_a_host_suspended_with_its_cards_resumes_with_them(
    world, running_host, django_capture_on_commit_callbacks
):
    instance = running_host(2)

    with django_capture_on_commit_callbacks(execute=True):
        suspend_for_funds(world.organization.pk)
    with django_capture_on_commit_callbacks(execute=True):
        resume_suspended(world.organization.pk)

    instance = Instance.objects.get(pk=instance.pk)
    assert instance.state == InstanceState.RUNNING and not instance.without_cards
    allocation = Allocation.objects.get(workload__instance=instance, released_at__isnull=True)
    assert allocation.accelerators.count() == 2
