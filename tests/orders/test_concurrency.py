"""Concurrent orders never oversell quota or capacity: real threads, real PostgreSQL
connections, row locks (SELECT ... FOR UPDATE)."""

import threading

import pytest
from django.db import connection

from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import NoCapacity
from apps.orders.models import INSTANCE_HOLDING_STATES, Instance
from apps.orders.services import submit_create
from apps.quotas.services import QuotaExceeded
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
