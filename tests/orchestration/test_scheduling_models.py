"""What the database refuses on its own: a share that is not a share of one card held by a
task, and a scheduling policy with a negative weight, no weight at all or a share outside 0–1."""

from decimal import Decimal

import pytest

from apps.orchestration.models import Accelerator, Allocation, SchedulingPolicy
from tests.factories import AllocationFactory, NodeFactory, ParkFactory, refused

pytestmark = pytest.mark.django_db


@pytest.fixture
def card():
    return Accelerator.objects.create(node=NodeFactory(), index=0)


def test_a_task_holds_a_share_of_one_card(card):
    allocation = AllocationFactory(
        node=card.node, for_task=True, share_milli=250, shared_accelerator=card
    )
    assert Allocation.objects.get(pk=allocation.pk).is_share


@pytest.mark.parametrize(
    ("fields", "for_task", "rule"),
    [
        ({"share_milli": 1000}, True, "allocation_share_of_one_card"),  # a whole card
        ({"share_milli": 250, "shared_accelerator": None}, True, "allocation_share_of_one_card"),
        ({"share_milli": 0}, True, "allocation_share_of_one_card"),  # a card without a share
        ({"share_milli": 250}, False, "allocation_share_is_a_tasks"),  # hosts take whole cards
    ],
    ids=["whole", "no card", "no share", "host"],
)
def test_the_database_refuses_what_is_not_a_share_of_one_card(card, fields, for_task, rule):
    values = {"shared_accelerator": card, **fields}
    with refused(rule):
        AllocationFactory(node=card.node, for_task=for_task, **values)


def test_the_database_refuses_a_share_moved_to_a_hosts_workload(card):
    share = AllocationFactory(
        node=card.node, for_task=True, share_milli=250, shared_accelerator=card
    )
    host = AllocationFactory(node=card.node)
    with refused("allocation_share_is_a_tasks"):
        Allocation.objects.filter(pk=share.pk).update(workload=host.workload_id)


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"price_weight": Decimal("-1")}, "scheduling_weights_not_negative"),
        (
            {
                "region_weight": 0,
                "performance_weight": 0,
                "energy_weight": 0,
                "price_weight": 0,
                "fragmentation_weight": 0,
            },
            "scheduling_weights_not_all_zero",
        ),
        ({"operator_share": Decimal("1.5")}, "scheduling_operator_share_0_to_1"),
    ],
)
def test_the_database_refuses_a_bad_policy(fields, constraint):
    with refused(constraint):
        SchedulingPolicy.objects.create(park=ParkFactory(), **fields)


def test_one_policy_per_park():
    park = ParkFactory()
    SchedulingPolicy.objects.create(park=park)
    with refused("orchestration_schedulingpolicy.park_id"):
        SchedulingPolicy.objects.create(park=park)


def test_a_park_without_a_policy_schedules_by_the_defaults():
    park = ParkFactory()
    policy = SchedulingPolicy.default_for(park)
    assert policy.pk is None
    assert policy.weights() == dict.fromkeys(SchedulingPolicy.WEIGHT_FIELDS, 1.0)
    assert policy.operator_share == Decimal("0.50")
    assert str(policy) == f"Scheduling policy of {park}"
