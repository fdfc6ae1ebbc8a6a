"""Training tasks end to end through apps.orchestration.scheduling: submitting (validation and
roles), the queue pass (price fixed at placement, shares that never oversell a card, whole
cards that avoid shared ones, fair share, backfill, queue positions, deadlines, maximum
prices, quota), cancelling, and the backend's run through the Celery jobs."""

from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.core.errors import InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration import selectors, tasks
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Accelerator, Allocation, Placement, Pool, Task, TaskState
from apps.orchestration.rooms import recount
from apps.orchestration.scheduling import cancel_task
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.models import ApiKeyScope
from apps.tenants.services import create_api_key
from tests.factories import (
    AcceleratorModelFactory,
    AllocationFactory,
    ImageFactory,
    MembershipFactory,
    OrganizationFactory,
    RegionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def reload(task) -> Task:
    return Task.objects.select_related("pool", "node").get(pk=task.pk)


def hold_cards(node, count):
    """A running host holding `count` whole cards of `node` (lowest indices first)."""
    allocation = AllocationFactory(node=node, vcpu=0, ram_gb=0)
    cards = list(
        Accelerator.objects.filter(node=node, allocation__isnull=True)
        .order_by("index")
        .values_list("pk", flat=True)[:count]
    )
    Accelerator.objects.filter(pk__in=cards).update(allocation=allocation)
    recount([node.pk])  # as the portal's paths keep the node's room when cards are taken
    return allocation


def live(task) -> Allocation | None:
    return Allocation.objects.filter(workload__task=task, released_at__isnull=True).first()


def verified_org(world):
    organization = OrganizationFactory(park=world.park, verified=True)
    user = UserFactory()
    MembershipFactory(organization=organization, user=user, role="owner")
    return organization, user


# --- submitting ------------------------------------------------------------------------------


def test_a_submitted_task_is_queued_with_what_it_asked(task_world):
    task = task_world.submit(
        name="bert",
        accelerator_model=task_world.h100,
        accelerator_milli=2000,
        vcpu=16,
        ram_gb=64,
        max_hourly_minor=5000,
        allowed_regions=[task_world.east],
        preference="green",
        priority=-2,
    )

    task = reload(task)
    assert task.state == TaskState.QUEUED
    assert (task.name, task.accelerator_milli, task.vcpu, task.ram_gb) == ("bert", 2000, 16, 64)
    assert task.accelerator_model == task_world.h100
    assert list(task.allowed_regions.all()) == [task_world.east]
    assert (task.preference, task.priority, task.max_hourly_minor) == ("green", -2, 5000)
    assert task.created_by == task_world.owner
    assert task.pool is None and task.hourly_minor == 0
    assert AuditEvent.objects.filter(action="task.submitted", object_id=str(task.pk)).exists()


def _bad(world):
    other_park_region = RegionFactory()
    return {
        "name": ({"name": " "}, "name"),
        "command": ({"command": ""}, "command"),
        "inactive image": ({"image": ImageFactory(park=world.park, is_active=False)}, "image"),
        "image of another park": ({"image": ImageFactory()}, "image"),
        "image for another model": (
            {
                "image": ImageFactory(park=world.park, compatible_accelerators=[world.a10]),
                "accelerator_model": world.h100,
            },
            "image",
        ),
        "no accelerator": ({"accelerator_milli": 0}, "accelerator_milli"),
        "one and a half cards": ({"accelerator_milli": 1500}, "accelerator_milli"),
        "nine cards": ({"accelerator_milli": 9000}, "accelerator_milli"),
        "no vcpu": ({"vcpu": 0}, "vcpu"),
        "too many vcpu": ({"vcpu": 1000}, "vcpu"),
        "no ram": ({"ram_gb": 0}, "ram_gb"),
        "negative price": ({"max_hourly_minor": -1}, "max_hourly_minor"),
        "past deadline": (
            {"deadline": timezone.now() - timedelta(minutes=1)},
            "deadline",
        ),
        "foreign region": ({"allowed_regions": [other_park_region]}, "allowed_regions"),
        "unknown preference": ({"preference": "fastest"}, "preference"),
        "raised priority": ({"priority": 1}, "priority"),
        "no pool in the region": ({"allowed_regions": [world.west]}, "allowed_regions"),
        "no pool of the model": ({"accelerator_model": world.a10}, "accelerator_model"),
        "no host large enough": ({"vcpu": 200}, "accelerator_milli"),
        "cheapest above the maximum": ({"max_hourly_minor": 1999}, "max_hourly_minor"),
    }


BAD = [
    "name",
    "command",
    "inactive image",
    "image of another park",
    "image for another model",
    "no accelerator",
    "one and a half cards",
    "nine cards",
    "no vcpu",
    "too many vcpu",
    "no ram",
    "negative price",
    "past deadline",
    "foreign region",
    "unknown preference",
    "raised priority",
    "no pool in the region",
    "no pool of the model",
    "no host large enough",
    "cheapest above the maximum",
]


@pytest.mark.parametrize("case", BAD)
def test_an_invalid_task_is_refused_on_its_field(task_world, case):
    fields, field = _bad(task_world)[case]

    with pytest.raises(ValidationError) as excinfo:
        task_world.submit(**fields)

    assert set(excinfo.value.message_dict) == {field}, excinfo.value.message_dict
    assert all(excinfo.value.message_dict[field])
    assert not Task.objects.exists()


def test_the_maximum_price_message_names_both_prices(task_world):
    with pytest.raises(ValidationError) as excinfo:
        task_world.submit(max_hourly_minor=1999)

    assert excinfo.value.message_dict["max_hourly_minor"] == [
        "The cheapest pool that could run it costs ¥20.00 per hour, above your maximum of ¥19.99."
    ]


@pytest.mark.parametrize(
    ("role", "allowed"),
    [("owner", True), ("admin", True), ("member", True), ("billing", False), ("viewer", False)],
)
def test_who_may_submit(task_world, member_of, role, allowed):
    user = member_of(task_world.organization, role)
    if allowed:
        assert task_world.submit(actor=user).state == TaskState.QUEUED
    else:
        with pytest.raises(PermissionDenied):
            task_world.submit(actor=user)
        assert not Task.objects.exists()


def test_a_read_key_may_not_submit_and_a_write_key_may(task_world):
    read, _ = create_api_key(
        organization=task_world.organization,
        actor=task_world.owner,
        name="r",
        scope=ApiKeyScope.READ,
    )
    write, _ = create_api_key(
        organization=task_world.organization,
        actor=task_world.owner,
        name="w",
        scope=ApiKeyScope.WRITE,
    )
    with pytest.raises(PermissionDenied):
        task_world.submit(actor=read)
    assert task_world.submit(actor=write).created_by is None


def test_submitting_runs_a_queue_pass_after_commit(task_world, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        task = task_world.submit()
    assert reload(task).state == TaskState.QUEUED  # nothing placed inside the transaction

    for callback in callbacks:
        callback()

    assert reload(task).state == TaskState.PLACED


def test_a_task_of_an_image_no_pool_runs_is_refused_naming_the_image_and_the_pool(task_world):
    """A pool whose backend runs tasks in images of its own (Slurm's containers) reports which:
    a task of another image is refused at submit, not left to fail when it runs."""
    Pool.objects.filter(pk=task_world.pools["east-h100"].pk).update(
        images={"debian-12": "sha256:d3ef"}
    )

    with pytest.raises(ValidationError) as excinfo:
        task_world.submit()

    assert excinfo.value.message_dict["image"] == [
        "The pools that could run this task (east-h100) cannot run the image pytorch: they run "
        "tasks only in debian-12. Choose one of those images."
    ]
    assert not Task.objects.exists()


def test_a_task_is_placed_only_where_its_image_runs_and_keeps_the_digest_it_ran_in(
    task_world, django_capture_on_commit_callbacks
):
    """The other pool runs only debian-12: the pytorch task goes to the one that runs pytorch,
    the other's node is refused for its image, and the task keeps the build's digest that pool
    reported once it is handed over."""
    other = task_world.pool("east-h100-other", region=task_world.east, model=task_world.h100)
    task_world.node("h2", pool=other)
    Pool.objects.filter(pk=other.pk).update(images={"debian-12": "sha256:d3ef"})
    Pool.objects.filter(pk=task_world.pools["east-h100"].pk).update(
        images={"debian-12": "sha256:d3ef", "pytorch": "sha256:70c4"}
    )

    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit()

    task = reload(task)
    assert task.pool == task_world.pools["east-h100"]
    assert task.image_digest == "sha256:70c4"
    placement = Placement.objects.get(workload__task=task)
    assert placement.weights["considered"]["rejected"] == {"image": 1}


# --- placing ---------------------------------------------------------------------------------


def test_a_pass_places_the_task_and_fixes_its_price(task_world):
    task = task_world.submit(accelerator_milli=2000)

    result = task_world.schedule()

    task = reload(task)
    assert result.placed == [task.pk]
    assert task.state == TaskState.PLACED
    assert task.pool == task_world.pools["east-h100"]
    assert task.node == task_world.nodes["h1"]
    assert task.hourly_minor == 4000  # 2000 per card-hour × 2 cards
    allocation = live(task)
    assert (allocation.vcpu, allocation.ram_gb, allocation.share_milli) == (8, 32, 0)
    assert allocation.accelerators.count() == 2
    placement = Placement.objects.get(workload__task=task)
    assert placement.chosen_node == task.node and placement.workload == task.workload
    assert placement.weights["left_free"] == 6
    (candidate,) = placement.candidates
    assert candidate["fits"] and set(candidate["parts"]) == {
        "region",
        "performance",
        "energy",
        "price",
        "fragmentation",
    }
    assert candidate["raw"]["price_minor"] == 4000


@pytest.fixture
def three_models(task_world):
    """The park of issue 35: a balanced 1-card task that runs on any model went to an H200 at
    ¥38/h (half used, so filling it fragments least) while an L40S at ¥8.28/h and an A100 at
    ¥18/h were free. The H100 node is full."""
    hold_cards(task_world.nodes["h1"], 8)
    models = {
        name: AcceleratorModelFactory(name=name, slug=name.lower(), fp16_tflops=tflops, tdp_w=w)
        for name, tflops, w in (("H200", 989, 700), ("L40S", 362, 350), ("A100", 312, 400))
    }
    task_world.image.compatible_accelerators.add(*models.values())
    for name, price in (("H200", 3800), ("L40S", 828), ("A100", 1800)):
        task_world.pool(name, region=task_world.east, model=models[name], price=price)
        task_world.node(f"{name.lower()}-1", pool=name)
    hold_cards(task_world.nodes["h200-1"], 4)
    return task_world


def test_balanced_does_not_pay_four_times_the_price_for_less_than_it_costs(three_models):
    task = three_models.submit(preference="balanced")

    three_models.schedule()

    task = reload(task)
    assert task.node.hostname == "l40s-1" and task.hourly_minor == 828
    placement = Placement.objects.get(workload__task=task)
    assert placement.plain_reason() == (
        "East: the cheapest place with free cards. Faster cards had room (H200, ¥38.00/h), "
        "but the same work would cost 1.7× as much there; choose “Fastest” to put speed first."
    )


def test_a_dearer_choice_says_what_it_costs_against_the_cheapest_and_what_it_gains(
    three_models,
):
    task = three_models.submit(preference="fast")

    three_models.schedule()

    placement = Placement.objects.get(workload__task=task)
    assert placement.chosen_node.hostname == "h200-1"
    assert placement.price_note() == (
        "It costs 4.6× the cheapest host with room (L40S in East, ¥8.28/h); its cards are "
        "2.7× as fast, so the same work costs 1.7× as much."
    )
    assert placement.price_note() in placement.describe()


@pytest.mark.parametrize(("milli", "price"), [(250, 500), (333, 666), (1000, 2000), (8000, 16000)])
def test_the_price_is_the_card_price_times_the_share_half_up(task_world, milli, price):
    task = task_world.submit(accelerator_milli=milli)
    task_world.schedule()
    assert reload(task).hourly_minor == price


def test_a_price_change_after_placement_does_not_reprice_the_task(task_world):
    task = task_world.submit()
    task_world.schedule()
    task_world.price(task_world.east, task_world.h100, 9999)

    assert reload(task).hourly_minor == 2000


def test_a_half_card_price_rounds_half_up(task_world):
    task_world.pool("odd", region=task_world.west, model=task_world.a10, price=1001)
    task_world.node("a1", pool="odd")
    task = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=500)

    task_world.schedule()

    assert reload(task).hourly_minor == 501  # 500.5


# --- shares ----------------------------------------------------------------------------------


def test_shares_pack_one_card_and_never_oversell_it(task_world):
    task_world.pool("tiny", region=task_world.west, model=task_world.a10, price=800)
    node = task_world.node("one-card", pool="tiny", accelerators=1)
    shares = [
        task_world.submit(accelerator_model=task_world.a10, accelerator_milli=300) for _ in range(4)
    ]

    task_world.schedule()

    states = [reload(t).state for t in shares]
    assert states == [TaskState.PLACED] * 3 + [TaskState.QUEUED]
    (card,) = Accelerator.objects.filter(node=node)
    assert task_world.share_used(card) == 900
    assert all(live(t).shared_accelerator == card for t in shares[:3])
    assert live(shares[3]) is None
    # The card is held while shared: no whole card is free on the node.
    assert task_world.free_cards(node) == 0

    task_world.schedule()  # another pass changes nothing
    assert task_world.share_used(card) == 900


def test_a_share_fills_the_fullest_card_that_still_holds_it(task_world):
    node = task_world.nodes["h1"]
    first = task_world.submit(accelerator_milli=600)
    task_world.schedule()
    second = task_world.submit(accelerator_milli=400)
    third = task_world.submit(accelerator_milli=500)
    task_world.schedule()

    assert live(first).shared_accelerator == live(second).shared_accelerator  # 600 + 400
    assert live(third).shared_accelerator != live(first).shared_accelerator
    assert task_world.share_used(live(first).shared_accelerator) == 1000
    assert task_world.free_cards(node) == 6


def test_whole_cards_never_land_on_a_shared_card(task_world):
    task_world.pool("pair", region=task_world.west, model=task_world.a10, price=800)
    node = task_world.node("two-cards", pool="pair", accelerators=2)
    share = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=100)
    task_world.schedule()
    shared = live(share).shared_accelerator

    one = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=1000)
    both = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=2000)
    task_world.schedule()

    assert reload(one).state == TaskState.PLACED
    assert reload(both).state == TaskState.QUEUED  # one whole card was left, not two
    assert list(live(one).accelerators.all()) != [shared]
    assert live(one).accelerators.get().node == node
    assert task_world.free_cards(node) == 0


def test_a_released_share_passes_the_card_to_the_next_share(task_world):
    task_world.pool("tiny", region=task_world.west, model=task_world.a10, price=800)
    node = task_world.node("one-card", pool="tiny", accelerators=1)
    a = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=500)
    b = task_world.submit(accelerator_model=task_world.a10, accelerator_milli=500)
    task_world.schedule()
    (card,) = Accelerator.objects.filter(node=node)

    cancel_task(task=a, actor=task_world.owner)

    card.refresh_from_db()
    assert card.allocation == live(b)  # still held: b's share is live
    assert task_world.share_used(card) == 500
    whole = task_world.submit(accelerator_model=task_world.a10)
    task_world.schedule()
    assert reload(whole).state == TaskState.QUEUED

    cancel_task(task=b, actor=task_world.owner)

    card.refresh_from_db()
    assert card.allocation is None
    task_world.schedule()
    assert reload(whole).state == TaskState.PLACED


# --- the queue: fairness, backfill, positions ------------------------------------------------


def test_an_organization_that_floods_the_queue_does_not_starve_another(task_world):
    task_world.node("h2", pool="east-h100")  # 16 cards: four 4-card tasks
    flood = [task_world.submit(name=f"flood-{i}", accelerator_milli=4000) for i in range(10)]
    other_org, other_owner = verified_org(task_world)
    late = task_world.submit(
        organization=other_org, actor=other_owner, name="late", accelerator_milli=4000
    )

    result = task_world.schedule()

    assert reload(late).state == TaskState.PLACED
    assert late.pk in result.placed
    assert sum(reload(t).state == TaskState.PLACED for t in flood) == 3


def test_recent_usage_sends_the_lighter_user_first(task_world):
    other_org, other_owner = verified_org(task_world)
    heavy_before = task_world.submit(accelerator_milli=8000)
    task_world.schedule()
    cancel_task(task=heavy_before, actor=task_world.owner)  # ran (for a moment)
    Task.objects.filter(pk=heavy_before.pk).update(started_at=timezone.now() - timedelta(hours=2))
    mine = task_world.submit(accelerator_milli=8000)
    theirs = task_world.submit(organization=other_org, actor=other_owner, accelerator_milli=8000)

    positions = selectors.queue_positions_in(task_world.park)
    task_world.schedule()

    assert positions == {theirs.pk: 1, mine.pk: 2}
    assert reload(theirs).state == TaskState.PLACED
    assert reload(mine).state == TaskState.QUEUED


def test_queue_positions_follow_priority_then_turns(task_world):
    hold_cards(task_world.nodes["h1"], 8)  # nothing fits: everything waits
    other_org, other_owner = verified_org(task_world)
    a1 = task_world.submit(name="a1")
    a2 = task_world.submit(name="a2")
    low = task_world.submit(name="low", priority=-1)
    b1 = task_world.submit(organization=other_org, actor=other_owner, name="b1")

    assert selectors.queue_positions_in(task_world.park) == {
        a1.pk: 1,
        b1.pk: 2,
        a2.pk: 3,
        low.pk: 4,
    }
    result = task_world.schedule()
    assert result.placed == []
    assert set(result.waiting) == {a1.pk, a2.pk, low.pk, b1.pk}


def test_small_tasks_backfill_around_a_blocked_head_but_not_into_its_hold(task_world):
    hold_cards(task_world.nodes["h1"], 2)  # h1: 6 of 8 free
    small_node = task_world.node("h-small", pool="east-h100", accelerators=2)
    head = task_world.submit(name="head", accelerator_milli=8000)
    small = task_world.submit(name="small", accelerator_milli=1000)
    medium = task_world.submit(name="medium", accelerator_milli=4000)

    result = task_world.schedule()

    assert reload(head).state == TaskState.QUEUED
    assert result.reserved == {head.pk: task_world.nodes["h1"].pk}
    assert reload(small).state == TaskState.PLACED
    assert reload(small).node == small_node  # backfilled outside the head's hold
    assert result.backfilled == [small.pk]
    assert reload(medium).state == TaskState.QUEUED  # would fit h1, which is held for the head


# --- deadlines and prices --------------------------------------------------------------------


def test_a_task_still_queued_at_its_deadline_fails_with_the_reason(task_world):
    hold_cards(task_world.nodes["h1"], 8)
    deadline = timezone.now() + timedelta(hours=1)
    task = task_world.submit(deadline=deadline)

    assert task_world.schedule().expired == []
    result = task_world.schedule(now=deadline + timedelta(seconds=1))

    task = reload(task)
    assert result.expired == [task.pk]
    assert task.state == TaskState.FAILED
    assert "passed before a host was free; it did not run" in task.logs
    assert not Allocation.objects.filter(workload__task=task).exists()


def test_a_deadline_still_ahead_does_not_stop_placement(task_world):
    task = task_world.submit(deadline=timezone.now() + timedelta(hours=1))
    task_world.schedule()
    assert reload(task).state == TaskState.PLACED


def test_the_maximum_price_sends_it_to_the_cheaper_pool(task_world):
    task_world.pool("west-a10", region=task_world.west, model=task_world.a10, price=600)
    task_world.node("a1", pool="west-a10")
    task = task_world.submit(max_hourly_minor=1000)

    task_world.schedule()

    task = reload(task)
    assert task.pool == task_world.pools["west-a10"]
    assert task.hourly_minor == 600
    rejected = {
        c["node"]: c["rejected"] for c in Placement.objects.get(workload__task=task).candidates
    }
    assert rejected == {"h1": "max_price", "a1": None}


def test_a_task_never_goes_above_its_maximum_even_when_the_cheap_pool_is_full(task_world):
    task_world.pool("west-a10", region=task_world.west, model=task_world.a10, price=600)
    cheap = task_world.node("a1", pool="west-a10", accelerators=1)
    hold_cards(cheap, 1)
    task = task_world.submit(max_hourly_minor=1000)

    task_world.schedule()

    assert reload(task).state == TaskState.QUEUED
    assert live(task) is None


def test_allowed_regions_are_a_hard_constraint(task_world):
    task_world.pool("west-h100", region=task_world.west, model=task_world.h100, price=100)
    task_world.node("w1", pool="west-h100")
    task = task_world.submit(allowed_regions=[task_world.east], preference="cheap")

    task_world.schedule()

    assert reload(task).node == task_world.nodes["h1"]
    rejected = {
        c["node"]: c["rejected"] for c in Placement.objects.get(workload__task=task).candidates
    }
    assert rejected["w1"] == "region"


# --- preferences -----------------------------------------------------------------------------


@pytest.fixture
def two_pools(task_world):
    """A fast, dear, coal-powered H100 pool and a slow, cheap, hydro-powered A10 pool."""
    hold_cards(task_world.nodes["h1"], 8)  # the world's own pool is full
    task_world.pool("fast", region=task_world.east, model=task_world.h100, pue="1.60", carbon=900)
    task_world.node("fast-1", pool="fast")
    task_world.pool(
        "eco", region=task_world.west, model=task_world.a10, price=400, pue="1.10", carbon=30
    )
    task_world.node("eco-1", pool="eco")
    return task_world


@pytest.mark.parametrize(
    ("preference", "pool"),
    [("fast", "fast"), ("cheap", "eco"), ("green", "eco")],
)
def test_the_tenants_preference_changes_the_choice(two_pools, preference, pool):
    task = two_pools.submit(preference=preference)

    two_pools.schedule()

    assert reload(task).pool == two_pools.pools[pool], Placement.objects.get(
        workload__task=task
    ).describe()


@pytest.mark.parametrize(("preference", "pool"), [("green", "clean-h100"), ("cheap", "cheap-a10")])
def test_green_and_cheap_part_ways_when_the_clean_pool_is_dear(task_world, preference, pool):
    hold_cards(task_world.nodes["h1"], 8)
    task_world.pool(
        "clean-h100", region=task_world.west, model=task_world.h100, pue="1.10", carbon=20
    )
    task_world.price(task_world.west, task_world.h100, 5000)
    task_world.node("clean", pool="clean-h100")
    task_world.pool(
        "cheap-a10", region=task_world.east, model=task_world.a10, price=300, carbon=900
    )
    task_world.node("cheap", pool="cheap-a10")
    task = task_world.submit(preference=preference)

    task_world.schedule()

    assert reload(task).pool == task_world.pools[pool]


def test_the_placement_says_why_in_plain_words(two_pools):
    task = two_pools.submit(preference="cheap")
    two_pools.schedule()

    placement = Placement.objects.get(workload__task=task)
    assert placement.describe() == (
        "Placed on eco-1 in West because: lowest price (¥4.00/h), lowest carbon "
        "(4 g CO₂e per compute-unit-hour)."
    )
    assert placement.weights["preference"] == "cheap"
    assert {c["node"] for c in placement.feasible_candidates()} == {"fast-1", "eco-1"}
    assert {c["node"]: c["rejected"] for c in placement.rejected_candidates()} == {
        "h1": "gpu_count"
    }


# --- quota -----------------------------------------------------------------------------------


def test_tasks_count_against_the_organizations_accelerator_quota(task_world):
    QuotaLimit.objects.create(
        park=task_world.park,
        organization=task_world.organization,
        resource=QuotaResource.ACCELERATORS,
        limit=2,
    )
    first = task_world.submit()
    quarter = task_world.submit(accelerator_milli=250)
    third = task_world.submit()

    result = task_world.schedule()

    assert reload(first).state == TaskState.PLACED
    assert reload(quarter).state == TaskState.PLACED  # 1.25 cards: 2 within the limit
    assert reload(third).state == TaskState.QUEUED
    assert result.held_back == {third.pk: "quota"}
    assert "Over your organization's quota for Accelerators" in reload(third).logs

    task_world.schedule()  # said once, not on every pass
    assert reload(third).logs.count("quota") == 1


# --- cancelling ------------------------------------------------------------------------------


def test_cancelling_a_queued_task(task_world):
    task = task_world.submit()

    cancel_task(task=task, actor=task_world.owner)

    task = reload(task)
    assert task.state == TaskState.CANCELLED
    assert task.finished_at is not None
    assert task_world.schedule().placed == []


def test_cancelling_a_placed_task_gives_its_cards_back(task_world):
    task = task_world.submit(accelerator_milli=4000)
    task_world.schedule()
    assert task_world.free_cards(task_world.nodes["h1"]) == 4

    cancel_task(task=task, actor=task_world.owner)

    assert reload(task).state == TaskState.CANCELLED
    assert task_world.free_cards(task_world.nodes["h1"]) == 8
    assert live(task) is None


def test_cancelling_a_running_task_tells_the_backend(
    task_world, django_capture_on_commit_callbacks, monkeypatch
):
    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit()
    assert reload(task).state == TaskState.RUNNING
    told = []
    monkeypatch.setattr(SimulatorDriver, "cancel_task", lambda self, handle: told.append(handle))

    with django_capture_on_commit_callbacks(execute=True):
        cancel_task(task=task, actor=task_world.owner)

    assert reload(task).state == TaskState.CANCELLED
    assert told == [reload(task).backend_handle]
    assert task_world.free_cards(task_world.nodes["h1"]) == 8


def test_a_finished_task_cannot_be_cancelled(task_world):
    task = task_world.submit()
    cancel_task(task=task, actor=task_world.owner)

    with pytest.raises(InvalidTransition):
        cancel_task(task=task, actor=task_world.owner)


def test_a_viewer_cannot_cancel(task_world, member_of):
    task = task_world.submit()

    with pytest.raises(PermissionDenied):
        cancel_task(task=task, actor=member_of(task_world.organization, "viewer"))

    assert reload(task).state == TaskState.QUEUED


# --- running on the backend ------------------------------------------------------------------


def quick(world, **config):
    world.backend.config = {"task_seconds": 0, "seed": 7, **config}
    world.backend.save()


def test_a_task_runs_on_the_simulator_and_succeeds(task_world, django_capture_on_commit_callbacks):
    quick(task_world)

    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit(accelerator_milli=2000)

    task = reload(task)
    assert task.state == TaskState.SUCCEEDED
    assert task.backend_handle.startswith("simtask-")
    assert "step 3/3" in task.logs and task.logs.endswith("exit code 0")
    assert task.started_at and task.finished_at >= task.started_at
    assert live(task) is None
    assert task_world.free_cards(task_world.nodes["h1"]) == 8


def test_a_task_that_exits_with_an_error_fails_with_its_logs(
    task_world, django_capture_on_commit_callbacks
):
    quick(task_world, task_failure_rate=1)

    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit()

    task = reload(task)
    assert task.state == TaskState.FAILED
    assert "exit code 1" in task.logs
    assert task.logs.endswith("simulator: the task exited with code 1 (simulated)")
    assert live(task) is None


def test_a_backend_that_refuses_the_task_fails_it(task_world, django_capture_on_commit_callbacks):
    SimulatorDriver.fail_next(BackendError("simulator: no such image"))

    with django_capture_on_commit_callbacks(execute=True):
        task = task_world.submit()

    task = reload(task)
    assert task.state == TaskState.FAILED
    assert task.logs == "simulator: no such image"
    assert live(task) is None


def test_a_finished_task_lets_the_next_one_start(task_world, django_capture_on_commit_callbacks):
    quick(task_world)

    with django_capture_on_commit_callbacks(execute=True):
        first = task_world.submit(name="first", accelerator_milli=8000)
        second = task_world.submit(name="second", accelerator_milli=8000)

    assert reload(first).state == TaskState.SUCCEEDED
    assert reload(second).state == TaskState.SUCCEEDED
    assert Placement.objects.filter(workload__task__in=[first, second]).count() == 2


def test_the_beat_polls_running_tasks_until_they_end(
    task_world, django_capture_on_commit_callbacks
):
    start = timezone.now()
    with time_machine.travel(start, tick=False) as traveller:
        with django_capture_on_commit_callbacks(execute=True):
            task = task_world.submit()
        assert reload(task).state == TaskState.RUNNING  # an hour-long simulated run

        traveller.shift(timedelta(minutes=30))
        with django_capture_on_commit_callbacks(execute=True):
            tasks.schedule_queues()
        assert reload(task).state == TaskState.RUNNING
        assert "step 1/3" in reload(task).logs

        traveller.shift(timedelta(minutes=31))
        with django_capture_on_commit_callbacks(execute=True):
            tasks.schedule_queues()
    task = reload(task)
    assert task.state == TaskState.SUCCEEDED
    assert "exit code 0" in task.logs


def test_the_beat_places_what_waits_in_every_park(task_world):
    task = task_world.submit()

    assert tasks.schedule_queues() == 1

    assert reload(task).state == TaskState.PLACED
