"""Nothing stuck, nothing lost: a job that never ran (lost message, killed worker, broker down at
commit) is sent again by the reconciliation sweep, and everything ends terminal with the books
exact; a dispatch that fails after commit never fails the request."""

from datetime import timedelta

import pytest
from django.utils import timezone
from kombu.exceptions import OperationalError

from apps.orchestration.models import Accelerator
from apps.orders import tasks as jobs
from apps.orders.models import Instance, InstanceState, Order, OrderState
from apps.quotas.services import Usage, organization_usage

pytestmark = pytest.mark.django_db


def age(*querysets, minutes=10):
    """Make rows look as if they had waited `minutes` (auto_now does not apply to update())."""
    for queryset in querysets:
        queryset.update(updated_at=timezone.now() - timedelta(minutes=minutes))


@pytest.fixture
def broker_down(monkeypatch):
    """Sending any job fails as kombu does when the broker cannot be reached."""

    def unreachable(*args, **kwargs):
        raise OperationalError("[Errno 111] Connection refused")

    for job in (jobs.provision_instance, jobs.fulfil_order):
        monkeypatch.setattr(job, "delay", unreachable)


def test_a_broker_down_at_commit_does_not_fail_the_order_and_the_key_still_holds(
    world, order_hosts, broker_down
):
    [order] = order_hosts(2, idempotency_key="k-1")  # the after-commit dispatch fails

    instance = Instance.objects.get(pk=order.instance_id)
    assert (order.state, instance.state) == (OrderState.FULFILLING, InstanceState.PROVISIONING)
    [again] = order_hosts(2, idempotency_key="k-1")  # a retry with the key orders nothing new
    assert again.pk == order.pk
    assert Instance.objects.count() == 1


def test_the_sweep_provisions_a_host_whose_job_was_lost(world, order_hosts, settings):
    settings.LOAM_RECONCILE_AFTER_S = 300
    [order] = order_hosts(2, run_tasks=False)  # the message never reached a worker
    assert jobs.reconcile_hosts() == 0  # not stuck yet: it may still be on its way

    age(Instance.objects.all(), Order.objects.all())
    assert jobs.reconcile_hosts() == 1

    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.state == InstanceState.RUNNING
    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert jobs.reconcile_hosts() == 0  # done: nothing left to send


def test_the_sweep_finishes_a_release_whose_job_was_lost(world, running_host, operate):
    instance = running_host(2)
    order = operate(instance, "release", run_tasks=False)
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASING

    age(Instance.objects.all(), Order.objects.filter(pk=order.pk))
    assert jobs.reconcile_hosts() == 1

    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASED
    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert not Accelerator.objects.filter(allocation__isnull=False).exists()
    assert organization_usage(world.organization) == Usage()


def test_a_job_sent_twice_by_the_sweep_gives_back_once(world, running_host, operate):
    instance = running_host(2)
    order = operate(instance, "release", run_tasks=False)
    age(Order.objects.filter(pk=order.pk))

    jobs.fulfil_order.delay(order.pk)  # the lost job turns up after all
    assert jobs.reconcile_hosts() == 0  # already done: the sweep sends nothing
    jobs.fulfil_order.delay(order.pk)  # and a duplicate changes nothing

    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASED
    assert not Accelerator.objects.filter(allocation__isnull=False).exists()


@pytest.mark.parametrize("stuck_in", ["provisioning", "releasing"])
def test_an_operator_can_force_release_a_stuck_host(
    world,
    order_hosts,
    running_host,
    operate,
    operator,
    stuck_in,
    django_capture_on_commit_callbacks,
):
    from apps.core.errors import DomainError
    from apps.orders.idle import force_release

    if stuck_in == "provisioning":
        [order] = order_hosts(2, run_tasks=False)
        instance = Instance.objects.get(pk=order.instance_id)
    else:
        instance = running_host(2)
        operate(instance, "release", run_tasks=False)
    assert Instance.objects.get(pk=instance.pk).state == stuck_in
    with pytest.raises(DomainError):  # its job may still be on its way: refused for now
        force_release(instance=instance, operator=operator, reason="stuck")

    age(Instance.objects.filter(pk=instance.pk))
    with django_capture_on_commit_callbacks(execute=True):
        release = force_release(instance=instance, operator=operator, reason="stuck")

    assert Order.objects.get(pk=release.pk).state == OrderState.DONE
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASED
    assert not Accelerator.objects.filter(allocation__isnull=False).exists()
    assert organization_usage(world.organization) == Usage()
    assert not Order.objects.exclude(state__in=(OrderState.DONE, OrderState.FAILED)).exists()
