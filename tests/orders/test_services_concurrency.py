"""Concurrent orders never oversell quota, spend or capacity, and operations crossing each other
are answered: real threads, real PostgreSQL connections, row locks (SELECT ... FOR UPDATE)."""

import threading

import pytest
from django.db import connection, transaction

from apps.billing import services as billing
from apps.core.transactions import lock
from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import NoCapacity
from apps.orders import operations
from apps.orders import services as order_services
from apps.orders.models import (
    INSTANCE_HOLDING_STATES,
    Instance,
    InstanceState,
    Order,
    OrderKind,
    OrderState,
)
from apps.orders.operations import request_operation
from apps.orders.services import fail_instance, submit_create
from apps.quotas import services as quota_services
from apps.quotas.models import QuotaLimit
from apps.quotas.services import QuotaExceeded
from tests.factories import FlavorFactory, PriceFactory
from tests.locks import wait_for_a_blocked_lock
from tests.worlds import sellable_world

SUBMISSIONS = 50


def world(*, accelerator_quota: int, nodes: int, per_node: int):
    w = sellable_world(accelerator_quota=accelerator_quota, nodes=nodes, per_node=per_node)
    return w.organization, w.owner, w.request, w.pool


def submit_concurrently(organization, owner, request):
    """SUBMISSIONS threads, released together, each on its own database connection."""
    start = threading.Barrier(SUBMISSIONS)
    outcomes, errors = [], []

    def one(index):
        try:
            start.wait(10)
            submit_create(
                organization=organization,
                actor=owner,
                request=request,
                idempotency_key=f"concurrent-{index}",
            )
            outcomes.append("ordered")
        except (QuotaExceeded, NoCapacity) as exc:
            outcomes.append(type(exc).__name__)
            errors.append(exc.message)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(SUBMISSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == SUBMISSIONS, "a submission raised something unexpected"
    return outcomes, errors


def held(pool):
    allocated = Accelerator.objects.filter(node__pool=pool, allocation__isnull=False).count()
    live = Allocation.objects.filter(node__pool=pool, released_at__isnull=True).count()
    holding = Instance.objects.filter(state__in=INSTANCE_HOLDING_STATES).count()
    return allocated, live, holding


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_orders_against_a_quota_of_eight_and_a_pool_of_twelve():
    organization, owner, request, pool = world(accelerator_quota=8, nodes=3, per_node=4)
    outcomes, errors = submit_concurrently(organization, owner, request)
    assert outcomes.count("ordered") == 8
    assert outcomes.count("QuotaExceeded") == SUBMISSIONS - 8
    assert all("8" in message for message in errors)  # each refusal names the limit
    assert held(pool) == (8, 8, 8)
    assert Instance.objects.count() == 8  # refused orders left no rows behind
    assert Accelerator.objects.filter(node__pool=pool, allocation__isnull=True).count() == 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_orders_against_a_pool_of_twelve_never_share_an_accelerator():
    organization, owner, request, pool = world(accelerator_quota=100, nodes=3, per_node=4)
    outcomes, _errors = submit_concurrently(organization, owner, request)
    assert outcomes.count("ordered") == 12
    assert outcomes.count("NoCapacity") == SUBMISSIONS - 12
    assert held(pool) == (12, 12, 12)
    # Every allocation holds exactly its one accelerator.
    for allocation in Allocation.objects.filter(released_at__isnull=True):
        assert allocation.accelerators.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_fifty_orders_against_a_monthly_spend_limit_of_three_first_hours():
    # ¥10.00 an hour each, a limit of ¥30.00 and nothing metered yet: each order's first hour
    # is committed under the organization's lock, so exactly three are accepted.
    organization, owner, request, pool = world(accelerator_quota=100, nodes=4, per_node=8)
    QuotaLimit.objects.create(
        park=organization.park, organization=organization, resource="monthly_spend", limit=3000
    )
    outcomes, errors = submit_concurrently(organization, owner, request)
    assert outcomes.count("ordered") == 3
    assert outcomes.count("QuotaExceeded") == SUBMISSIONS - 3
    assert all("¥30.00" in message for message in errors)
    assert Instance.objects.count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_operation_asked_while_a_resize_commits_waits_for_it_and_is_answered():
    """A stop asked while a resize holds the host's lock and changes its flavor waits for it,
    then is answered: locking the host in the statement that joins its flavor lost the row
    once the resize committed (PostgreSQL's recheck of the updated row against the old
    flavor), a 500 (Instance.DoesNotExist) for the loser of a resize/release race."""
    organization, owner, request, _pool = world(accelerator_quota=100, nodes=1, per_node=8)
    (order,) = submit_create(organization=organization, actor=owner, request=request)
    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.state == InstanceState.RUNNING
    larger = FlavorFactory(family=instance.flavor.family, accelerator_count=2, vcpu=8, ram_gb=32)
    resize_holds_the_host, errors = threading.Event(), []

    def resize_while_a_stop_arrives():
        try:
            with transaction.atomic():
                lock(Instance, instance.pk)
                resize_holds_the_host.set()
                wait_for_a_blocked_lock()  # the stop is waiting now
                Instance.objects.filter(pk=instance.pk).update(flavor=larger)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    resizer = threading.Thread(target=resize_while_a_stop_arrives)
    resizer.start()
    assert resize_holds_the_host.wait(10)
    stop = request_operation(instance=instance, actor=owner, kind=OrderKind.STOP)
    resizer.join(20)

    assert errors == []
    assert stop.kind == OrderKind.STOP
    assert Instance.objects.get(pk=instance.pk).flavor == larger


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_host_failing_while_an_order_takes_the_wallet_waits_instead_of_deadlocking(monkeypatch):
    """An order locks the wallet, then a node; a host failing on that node gave its cards back
    (the node) before its first hour (the wallet): each waited on the other's lock, and
    PostgreSQL failed one of them. Now the host leaves its state (the wallet) first."""
    organization, owner, request, _pool = world(accelerator_quota=100, nodes=1, per_node=8)
    (first,) = submit_create(organization=organization, actor=owner, request=request)
    failing = Instance.objects.get(pk=first.instance_id)
    order_holds_the_wallet, errors = threading.Event(), []
    require_funds = billing.require_funds

    def funds_then_wait(*args, **kwargs):
        wallet = require_funds(*args, **kwargs)
        order_holds_the_wallet.set()
        wait_for_a_blocked_lock()  # the failing host waits on the wallet now
        return wallet

    def order_while_a_host_fails():
        try:
            submit_create(organization=organization, actor=owner, request=request)
        except Exception as exc:  # a deadlock is what this looks for
            errors.append(exc)
        finally:
            connection.close()

    monkeypatch.setattr(billing, "require_funds", funds_then_wait)
    orderer = threading.Thread(target=order_while_a_host_fails)
    orderer.start()
    assert order_holds_the_wallet.wait(10)
    fail_instance(instance_id=failing.pk, message="the backend lost it")
    orderer.join(20)

    assert errors == []
    assert Instance.objects.get(pk=failing.pk).state == InstanceState.ERROR
    assert Instance.objects.filter(state=InstanceState.RUNNING).count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_resize_asked_while_an_order_holds_the_organization_waits_instead_of_deadlocking(
    monkeypatch,
):
    """An order locks the organization (its quota), then the wallet; a resize locked the wallet
    (its funds), then the organization: each waited on the other's lock, and PostgreSQL failed
    one of them. Now a resize takes the organization first too."""
    organization, owner, request, _pool = world(accelerator_quota=100, nodes=1, per_node=8)
    (first,) = submit_create(organization=organization, actor=owner, request=request)
    running = Instance.objects.get(pk=first.instance_id)
    larger = FlavorFactory(family=running.flavor.family, accelerator_count=2, vcpu=8, ram_gb=32)
    PriceFactory(flavor=larger, region=running.region, amount_minor=2000)
    order_holds_the_organization, errors = threading.Event(), []
    reserve = quota_services.reserve

    def reserve_then_wait(**kwargs):
        reserve(**kwargs)
        order_holds_the_organization.set()
        wait_for_a_blocked_lock()  # the resize waits on the organization now
        return None

    def order_while_a_host_resizes():
        try:
            submit_create(organization=organization, actor=owner, request=request)
        except Exception as exc:  # a deadlock is what this looks for
            errors.append(exc)
        finally:
            connection.close()

    monkeypatch.setattr(quota_services, "reserve", reserve_then_wait)
    orderer = threading.Thread(target=order_while_a_host_resizes)
    orderer.start()
    assert order_holds_the_organization.wait(10)
    resize = request_operation(
        instance=running, actor=owner, kind=OrderKind.RESIZE, params={"flavor": larger}
    )
    orderer.join(20)

    assert errors == []
    assert resize.kind == OrderKind.RESIZE
    assert Instance.objects.filter(organization=organization).count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_host_failing_while_its_operation_completes_waits_instead_of_deadlocking(monkeypatch):
    """A host failing (a force-release giving up a stuck stop) locks the host, then its open
    orders; the stop completing locked its order, then the host: each waited on the other's
    lock, and PostgreSQL failed one of them. Now an operation locks its host first too."""
    organization, owner, request, _pool = world(accelerator_quota=100, nodes=1, per_node=8)
    (first,) = submit_create(organization=organization, actor=owner, request=request)
    instance = Instance.objects.get(pk=first.instance_id)
    monkeypatch.setattr(operations, "on_commit_task", lambda *args, **kwargs: None)  # no job
    stop = request_operation(instance=instance, actor=owner, kind=OrderKind.STOP)
    errors, completer = [], None
    move_instance = order_services.move_instance

    def complete_the_stop():
        try:
            operations.complete_operation(order_id=stop.pk)
        except Exception as exc:  # a deadlock is what this looks for
            errors.append(exc)
        finally:
            connection.close()

    def move_while_the_stop_completes(**kwargs):
        nonlocal completer
        completer = threading.Thread(target=complete_the_stop)
        completer.start()
        wait_for_a_blocked_lock()  # the completion waits on the host now
        return move_instance(**kwargs)

    monkeypatch.setattr(order_services, "move_instance", move_while_the_stop_completes)
    fail_instance(instance_id=instance.pk, message="stuck", keep_capacity=True)
    completer.join(20)

    assert errors == []
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.ERROR
    assert Order.objects.get(pk=stop.pk).state == OrderState.FAILED
