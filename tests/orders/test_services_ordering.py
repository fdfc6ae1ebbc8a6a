"""Ordering hosts end to end: submit_create, quotes, the scheduler's region choice, validation,
idempotency, the approval policy, quota and capacity refusals, and quota given back."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.agents.models import AgentHost
from apps.catalog.models import Region, SoftwareStack
from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.models import Accelerator, Allocation, Placement
from apps.orchestration.services import NoCapacity, best_region
from apps.orders.models import ApprovalPolicy, Instance, InstanceState, Order, OrderState
from apps.orders.services import (
    approve_order,
    cancel_order,
    quote,
    reject_order,
    set_approval_policy,
    submit_create,
    validate_host_request,
)
from apps.quotas.models import QuotaResource
from apps.quotas.services import QuotaExceeded, Usage, organization_usage
from apps.tenants.models import VerificationState
from tests.factories import (
    AcceleratorModelFactory,
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    ParkFactory,
    ParkOperatorFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
    UserFactory,
)
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

CU = Decimal("3.12")  # compute units of one accelerator of the world's model


def row_counts():
    return (
        Instance.objects.count(),
        Order.objects.count(),
        Allocation.objects.count(),
        Placement.objects.count(),
    )


def actions_for(obj):
    return list(
        AuditEvent.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk))
        .order_by("id")
        .values_list("action", flat=True)
    )


def holding(world, accelerators, *, instances=1, disk_gb=100):
    """What `instances` hosts of `accelerators` each hold, in the world's model."""
    return Usage(
        accelerators=accelerators * instances,
        compute_units=CU * accelerators * instances,
        vcpu=16 * accelerators * instances,
        ram_gb=128 * accelerators * instances,
        disk_gb=disk_gb * instances,
        instances=instances,
        by_model={world.model.pk: accelerators * instances},
    )


# --- submit_create, end to end ---------------------------------------------------------------


def test_submit_create_provisions_a_running_host(world, order_hosts, owner):
    (order,) = order_hosts(4)

    assert order.state == OrderState.DONE
    assert order.kind == "create"
    assert order.created_by == owner
    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.state == InstanceState.RUNNING
    assert instance.name == "gpu-host"
    assert instance.error_message == ""
    assert instance.backend_handle.startswith("sim-")
    assert instance.access["address"].startswith("198.18.")
    assert instance.access["ssh_port"] == 22
    assert instance.access["ssh_user"] == "root"
    assert instance.region == world.region
    assert instance.pool == world.pool
    assert instance.node in world.nodes

    allocation = Allocation.objects.get(workload__instance=instance)
    assert allocation.released_at is None
    assert allocation.node == instance.node
    assert (allocation.vcpu, allocation.ram_gb) == (64, 512)
    devices = Accelerator.objects.filter(allocation=allocation)
    assert devices.count() == 4
    assert set(devices.values_list("node", flat=True)) == {instance.node_id}
    assert world.free_accelerators() == 12

    placement = Placement.objects.get(workload__instance__orders=order)
    assert placement.chosen_node == instance.node
    assert placement.chosen_pool == world.pool
    assert placement.weights["policy"] == "best-fit"
    assert placement.weights["left_free"] == 4
    assert sorted(c["node"] for c in placement.candidates) == ["node-a", "node-b"]
    assert all(c["fits"] and c["free_accelerators"] == 8 for c in placement.candidates)
    explanation = placement.describe()
    assert instance.node.hostname in explanation
    assert "Center" in explanation
    assert "(4)" in explanation

    assert organization_usage(world.organization) == holding(world, 4)
    assert order.hourly_minor == 4000
    assert order.quote["hourly_minor"] == "4000"
    assert order.parameters == {
        "flavor": "g1.4x",
        "image": "ubuntu-cuda",
        "region": "center",
        "system_disk_gb": 100,
        "data_disk_gb": 0,
        "bandwidth_mbps": 0,
        "preference": "balanced",
        "scheduler_chose_region": False,
    }
    assert actions_for(order) == [
        "order.submitted",
        "order.approved",
        "order.fulfilling",
        "order.done",
    ]
    assert actions_for(instance) == ["instance.provisioning", "instance.running"]


def test_accelerators_are_taken_when_the_order_is_submitted(world, order_hosts):
    (order,) = order_hosts(2, run_tasks=False)

    assert order.state == OrderState.FULFILLING
    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.state == InstanceState.PROVISIONING
    assert instance.backend_handle == ""
    assert instance.access == {}
    assert Accelerator.objects.filter(allocation__workload__instance=instance).count() == 2
    assert world.free_accelerators() == 14
    assert organization_usage(world.organization) == holding(world, 2)


def test_several_hosts_in_one_order(world, order_hosts):
    orders = order_hosts(2, count=3, name="train")

    assert [o.state for o in orders] == [OrderState.DONE] * 3
    instances = Instance.objects.filter(pk__in=[o.instance_id for o in orders]).order_by("name")
    assert [i.name for i in instances] == ["train-1", "train-2", "train-3"]
    assert {i.state for i in instances} == {InstanceState.RUNNING}
    assert all(o.quote["count"] == 1 and o.hourly_minor == 2000 for o in orders)
    assert world.free_accelerators() == 10
    assert organization_usage(world.organization) == holding(world, 2, instances=3)


# --- quotes ----------------------------------------------------------------------------------


def test_quote_of_the_flavor_alone(world, organization):
    quoted = quote(organization=organization, request=world.request(2))

    assert quoted.region == world.region
    assert quoted.currency == world.park.currency
    assert quoted.flavor_hourly_minor == 2000
    assert quoted.disk_hourly_minor == 0
    assert quoted.bandwidth_hourly_minor == 0
    assert quoted.hourly_minor == 2000
    assert quoted.per_second_minor == Decimal(2000) / 3600
    assert quoted.monthly_minor == 2000 * 720


def test_quote_adds_disk_and_bandwidth_per_month_over_720_hours(world, organization):
    request = world.request(1, system_disk_gb=150, data_disk_gb=200, bandwidth_mbps=10, count=2)

    quoted = quote(organization=organization, request=request)

    # 50 GB of system disk above the flavor's 100 GB plus 200 GB of cloud disk, at 36 a month;
    # 10 Mbps at 720 a month.
    assert quoted.disk_hourly_minor == Decimal("12.5")
    assert quoted.bandwidth_hourly_minor == Decimal(10)
    assert quoted.hourly_minor == Decimal("2045")  # (1000 + 12.5 + 10) × 2
    assert quoted.per_second_minor == Decimal("2045") / 3600
    assert quoted.monthly_minor == Decimal("2045") * 720
    assert quoted.hourly_minor_rounded == 2045
    assert quoted.as_json() == {
        "currency": world.park.currency,
        "region": "center",
        "count": 2,
        "flavor_hourly_minor": 1000,
        "disk_hourly_minor": "12.5",
        "bandwidth_hourly_minor": "10",
        "hourly_minor": "2045.0",
    }


@pytest.mark.parametrize(
    ("system_disk_gb", "data_disk_gb", "billed_gb"),
    [(100, 0, 0), (101, 0, 1), (120, 0, 20), (100, 7, 7), (2048, 32768, 1948 + 32768)],
)
def test_disk_is_billed_only_above_the_flavors_system_disk(
    world, organization, system_disk_gb, data_disk_gb, billed_gb
):
    request = world.request(1, system_disk_gb=system_disk_gb, data_disk_gb=data_disk_gb)

    quoted = quote(organization=organization, request=request)

    assert quoted.disk_hourly_minor == Decimal(36) * billed_gb / 720
    assert quoted.hourly_minor == 1000 + Decimal(36) * billed_gb / 720


def test_quote_keeps_fractions_and_the_order_rounds_half_up(world, order_hosts):
    PriceFactory(
        region=world.region,
        disk=True,
        amount_minor=30,
        effective_from=timezone.now() - timedelta(minutes=1),
    )
    PriceFactory(
        region=world.region,
        bandwidth=True,
        amount_minor=1000,
        effective_from=timezone.now() - timedelta(minutes=1),
    )
    request = world.request(1, data_disk_gb=7, bandwidth_mbps=3)

    quoted = quote(organization=world.organization, request=request)

    disk, bandwidth = Decimal(30) * 7 / 720, Decimal(1000) * 3 / 720
    assert quoted.disk_hourly_minor == disk  # 0.2916…, kept, not rounded
    assert quoted.bandwidth_hourly_minor == bandwidth  # 4.1666…
    hourly = 1000 + disk + bandwidth
    assert quoted.hourly_minor == hourly
    assert quoted.per_second_minor == hourly / 3600
    assert quoted.monthly_minor == hourly * 720
    assert quoted.hourly_minor_rounded == 1004  # 1004.458…

    (order,) = order_hosts(request=request)
    assert order.hourly_minor == 1004
    assert Decimal(order.quote["hourly_minor"]) == hourly


def test_quote_uses_the_price_in_force(world, organization):
    flavor = world.flavors[1]
    PriceFactory(
        region=world.region,
        flavor=flavor,
        amount_minor=1100,
        effective_from=timezone.now() - timedelta(hours=1),
    )
    PriceFactory(
        region=world.region,
        flavor=flavor,
        amount_minor=5000,
        effective_from=timezone.now() + timedelta(days=1),
    )

    assert quote(organization=organization, request=world.request(1)).hourly_minor == 1100


def test_quote_refuses_a_flavor_not_sold_in_the_region(world, organization):
    west = RegionFactory(park=world.park, code="west", name="West")

    with pytest.raises(DomainError) as excinfo:
        quote(organization=organization, request=world.request(1, region=west))

    assert excinfo.value.code == "not_priced"
    assert "g1.1x" in excinfo.value.message and "West" in excinfo.value.message


# --- the scheduler chooses the region --------------------------------------------------------


@pytest.fixture
def east(world):
    """A second region, cheaper (900 per accelerator-hour), 5 ms away, with one 8-card node."""
    region = RegionFactory(park=world.park, code="east", name="East", latency_ms=5)
    pool = PoolFactory(
        backend=world.backend, region=region, accelerator_model=world.model, name="pool-east"
    )
    world.add_node("east-1", pool=pool)
    world.price_flavors(region, per_accelerator=900)
    return region


def test_scheduler_chooses_the_cheapest_region_with_room(world, east, order_hosts):
    (order,) = order_hosts(4, region=None, preference="cheap")

    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.region == east
    assert instance.node.hostname == "east-1"
    assert instance.state == InstanceState.RUNNING
    assert order.parameters["region"] == "east"
    assert order.hourly_minor == 3600


def test_scheduler_passes_over_a_cheaper_region_that_is_full(world, east, order_hosts):
    order_hosts(8, region=None, preference="cheap")  # fills east-1

    (order,) = order_hosts(1, region=None, preference="cheap")

    instance = Instance.objects.get(pk=order.instance_id)
    assert instance.region == world.region
    assert order.hourly_minor == 1000


def test_the_scheduler_scores_every_region_and_says_so_truly(world, east, order_hosts):
    """Letting the scheduler choose, a host is placed over every region with the tenant's
    preference, and the decision keeps (and its explanation rests on) every candidate."""
    (cheap,) = order_hosts(1, region=None, preference="cheap", name="cheap")
    placement = Placement.objects.get(workload__instance__orders=cheap)

    regions = {c["region"] for c in placement.candidates}
    assert len(regions) == 2  # both regions were candidates, not one pinned in advance
    assert Instance.objects.get(pk=cheap.instance_id).region == east
    assert placement.chosen_pool.region == east
    assert len(placement.feasible_candidates()) >= 2
    assert "the only host with room" not in placement.describe()
    best = max(placement.feasible_candidates(), key=lambda c: c["total"])
    assert best["node"] == placement.chosen_node.hostname
    assert cheap.hourly_minor == 900  # billed at the region it runs in


def filled_before_their_lock(monkeypatch, filled) -> None:
    """The nodes `filled(node)` says answer their lock-time re-count as full (taken meanwhile)."""
    from apps.orchestration import services as orchestration

    real = orchestration._allocate_on
    monkeypatch.setattr(
        orchestration,
        "_allocate_on",
        lambda node, **kw: None if filled(node) else real(node, **kw),
    )


def refused_without_a_trace(world, owner, *says) -> None:
    """A one-host order the scheduler places is refused for capacity, saying `says`, and
    leaves no row behind."""
    before = row_counts()
    with pytest.raises(NoCapacity) as excinfo:
        submit_create(
            organization=world.organization, actor=owner, request=world.request(1, region=None)
        )
    for words in says:
        assert words in excinfo.value.message
    assert row_counts() == before


@pytest.fixture
def twin(world):
    """A region the same as the world's in all but name (price, latency, pool), so the best
    fit decides between them: twin-1 has 5 of 8 cards held, node-a 4 of 8, twin-2 none."""
    from tests.orchestration.test_scheduling import hold_cards

    region = RegionFactory(park=world.park, code="twin", name="Twin")
    Region.objects.filter(pk=region.pk).update(latency_ms=world.region.latency_ms)
    region.refresh_from_db()
    pool = PoolFactory(backend=world.backend, region=region, accelerator_model=world.model)
    world.price_flavors(region)  # as the world's region is priced
    hold_cards(world.add_node("twin-1", pool=pool), 5)
    hold_cards(world.nodes[0], 4)
    world.add_node("twin-2", pool=pool)
    return region


def test_a_host_stays_in_the_region_it_was_quoted_in_when_its_best_node_fills_up(
    world, twin, order_hosts, monkeypatch
):
    """Quoted in twin (twin-1 fits best); twin-1 fills up before the order's lock and the
    next best, node-a, is in the other region: the host goes to twin-2, at the quoted price,
    rather than elsewhere or nowhere."""
    from apps.orchestration.services import plan_placement

    plan = plan_placement(park=world.park, flavor=world.flavors[1])
    ranked = [view.node.hostname for view in plan.ranked]
    assert ranked.index("twin-1") < ranked.index(world.nodes[0].hostname) < ranked.index("twin-2")
    filled_before_their_lock(monkeypatch, lambda node: node.hostname == "twin-1")

    (order,) = order_hosts(1, region=None)

    instance = Instance.objects.get(pk=order.instance_id)
    assert (instance.node.hostname, instance.region) == ("twin-2", twin)
    placement = Placement.objects.get(workload__instance__orders=order)
    rejected = {c["node"]: c["rejected"] for c in placement.rejected_candidates()}
    assert rejected["twin-1"] == "taken"
    assert rejected[world.nodes[0].hostname] == "other_region"
    # node-a, and node-b (as empty as twin-2, and first in the tie) were passed over.
    assert placement.weights["considered"]["rejected"] == {"taken": 1, "other_region": 2}


def test_a_host_whose_quoted_region_filled_up_is_refused_not_billed_elsewhere(
    world, twin, owner, monkeypatch
):
    filled_before_their_lock(monkeypatch, lambda node: node.pool.region_id == twin.pk)

    refused_without_a_trace(world, owner, "No host has 1 free", "in Twin right now")


def test_every_host_of_an_order_is_placed_in_the_region_it_was_quoted_in(world, east, owner):
    """Four one-card hosts quoted in east: east-1 has room for them all, however the later
    hosts would score elsewhere with the earlier ones placed."""
    world.add_node("west-2", pool=world.nodes[0].pool)  # more room in the dearer region

    orders = submit_create(
        organization=world.organization,
        actor=owner,
        request=world.request(1, region=None, preference="cheap", count=4),
    )

    instances = Instance.objects.filter(pk__in=[o.instance_id for o in orders])
    assert {i.region for i in instances} == {east}
    assert {o.hourly_minor for o in orders} == {900}


def test_scheduler_passes_over_a_region_where_the_flavor_is_not_sold(world, organization):
    cheap = RegionFactory(park=world.park, code="unpriced", name="Unpriced")
    pool = PoolFactory(backend=world.backend, region=cheap, accelerator_model=world.model)
    world.add_node("unpriced-1", pool=pool)

    assert best_region(park=organization.park, flavor=world.flavors[1]) == world.region


def test_scheduler_breaks_a_price_tie_by_latency(world, organization):
    near = RegionFactory(park=world.park, code="near", name="Near", latency_ms=0)
    far = RegionFactory(park=world.park, code="far", name="Far", latency_ms=40)
    for region in (far, near):
        pool = PoolFactory(backend=world.backend, region=region, accelerator_model=world.model)
        world.add_node(f"{region.code}-1", pool=pool)
        world.price_flavors(region, per_accelerator=500)

    assert best_region(park=organization.park, flavor=world.flavors[2]) == near


def test_scheduler_with_no_room_anywhere(world, owner):
    for node in world.nodes:
        node.is_drained = True
        node.save()

    refused_without_a_trace(world, owner, "No region has a free host of g1.1x")


# --- validation ------------------------------------------------------------------------------


def _other_park_flavor(world):
    return {"flavor": FlavorFactory(accelerator_count=1)}


def _inactive_flavor(world):
    flavor = world.flavors[1]
    flavor.is_active = False
    flavor.save()
    return {"flavor": flavor}


def _wrong_stack_image(world):
    ascend = AcceleratorModelFactory(ascend=True)
    image = ImageFactory(
        park=world.park, software_stack=SoftwareStack.CANN, compatible_accelerators=[ascend]
    )
    return {"image": image}


def _other_park_image(world):
    return {"image": ImageFactory(compatible_accelerators=[world.model])}


def _inactive_image(world):
    return {
        "image": ImageFactory(
            park=world.park, is_active=False, compatible_accelerators=[world.model]
        )
    }


def _other_park_region(world):
    return {"region": RegionFactory()}


def _fields(**values):
    return lambda world: values


SECOND_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 a\n"
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 b"
)

REFUSALS = {
    "flavor of another park": ("flavor", _other_park_flavor),
    "flavor not on sale": ("flavor", _inactive_flavor),
    "image of another stack": ("image", _wrong_stack_image),
    "image of another park": ("image", _other_park_image),
    "image withdrawn": ("image", _inactive_image),
    "region of another park": ("region", _other_park_region),
    "system disk below the flavor's": ("system_disk_gb", _fields(system_disk_gb=99)),
    "system disk above 2048": ("system_disk_gb", _fields(system_disk_gb=2049)),
    "negative cloud disk": ("data_disk_gb", _fields(data_disk_gb=-1)),
    "cloud disk above 32768": ("data_disk_gb", _fields(data_disk_gb=32769)),
    "negative bandwidth": ("bandwidth_mbps", _fields(bandwidth_mbps=-1)),
    "bandwidth above 10000": ("bandwidth_mbps", _fields(bandwidth_mbps=10001)),
    "no host": ("count", _fields(count=0)),
    "more than 10 hosts": ("count", _fields(count=11)),
    "no name": ("name", _fields(name="")),
    "upper-case name": ("name", _fields(name="GPU-host")),
    "name with an underscore": ("name", _fields(name="gpu_host")),
    "name ending in a hyphen": ("name", _fields(name="gpu-")),
    "name starting with a digit": ("name", _fields(name="1gpu")),
    "name of 64 characters": ("name", _fields(name="a" * 64)),
    "no SSH key": ("ssh_public_key", _fields(ssh_public_key="")),
    "unknown key type": ("ssh_public_key", _fields(ssh_public_key="ssh-dss AAAAB3NzaC1kc3M=")),
    "key data cut off": ("ssh_public_key", _fields(ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZ")),
    "two keys": ("ssh_public_key", _fields(ssh_public_key=SECOND_KEY)),
}


@pytest.mark.parametrize(("field", "change"), REFUSALS.values(), ids=REFUSALS.keys())
def test_every_refusal_names_its_field_and_creates_nothing(world, owner, field, change):
    request = world.request(1, **change(world))
    before, events = row_counts(), AuditEvent.objects.count()

    with pytest.raises(ValidationError) as excinfo:
        submit_create(organization=world.organization, actor=owner, request=request)

    assert list(excinfo.value.message_dict) == [field]
    assert row_counts() == before
    assert AuditEvent.objects.count() == events
    assert world.free_accelerators() == 16


def test_a_host_only_ssh_reaches_needs_the_tenants_key_and_says_so(world, owner):
    request = world.request(1, ssh_public_key="")
    with pytest.raises(ValidationError) as excinfo:
        submit_create(organization=world.organization, actor=owner, request=request)

    assert excinfo.value.message_dict["ssh_public_key"] == [
        "Hosts of this flavor are reached over SSH only: paste the public key you will log in with."
    ]


def test_a_host_the_web_terminal_reaches_needs_no_key(agent_world, order_host):
    """Every pool that may place it is an agent pool, whose hosts the terminal logs in to."""
    instance = order_host(ssh_public_key="  ")

    assert instance.ssh_public_key == ""
    assert AgentHost.objects.get(handle=instance.backend_handle).ssh_public_keys == []


def test_all_refusals_are_reported_at_once(world, organization):
    request = world.request(
        1,
        region=RegionFactory(),
        system_disk_gb=10,
        data_disk_gb=-5,
        bandwidth_mbps=20000,
        count=99,
        name="Bad Name",
        ssh_public_key="nonsense",
    )

    with pytest.raises(ValidationError) as excinfo:
        validate_host_request(organization, request)

    assert set(excinfo.value.message_dict) == {
        "region",
        "system_disk_gb",
        "data_disk_gb",
        "bandwidth_mbps",
        "count",
        "name",
        "ssh_public_key",
    }


def test_the_limits_themselves_are_accepted(world, organization):
    for fields in (
        {"system_disk_gb": 100},
        {"system_disk_gb": 2048},
        {"data_disk_gb": 0},
        {"data_disk_gb": 32768},
        {"bandwidth_mbps": 0},
        {"bandwidth_mbps": 10000},
        {"count": 1},
        {"count": 10},
        {"name": "a"},
        {"name": "a" * 63},
        {"name": "a-1"},
    ):
        validate_host_request(organization, world.request(1, **fields))


def test_names_of_several_hosts_must_be_valid_host_names(world, owner):
    request = world.request(1, name="a" * 62, count=2)

    with pytest.raises(ValidationError) as excinfo:
        submit_create(organization=world.organization, actor=owner, request=request)

    assert "name" in excinfo.value.message_dict


# --- idempotency -----------------------------------------------------------------------------


def test_same_idempotency_key_returns_the_same_orders(world, order_hosts):
    first = order_hosts(2, idempotency_key="click-1")
    again = order_hosts(2, idempotency_key="click-1")

    assert [o.pk for o in again] == [o.pk for o in first]
    assert Instance.objects.count() == 1
    assert Order.objects.count() == 1
    assert world.free_accelerators() == 14
    assert first[0].idempotency_key == "click-1:0"


def test_a_replay_returns_every_host_of_the_first_call(world, order_hosts):
    first = order_hosts(1, count=3, idempotency_key="batch-7")
    again = order_hosts(1, count=3, idempotency_key="batch-7")

    assert [o.pk for o in again] == [o.pk for o in first]
    assert [o.idempotency_key for o in first] == ["batch-7:0", "batch-7:1", "batch-7:2"]
    assert Instance.objects.count() == 3


def test_a_replay_is_answered_even_when_the_request_would_now_be_refused(world, order_hosts):
    first = order_hosts(1, idempotency_key="k")
    world.set_limit(QuotaResource.INSTANCES, 1)  # a second host would now be over quota

    assert [o.pk for o in order_hosts(1, idempotency_key="k")] == [o.pk for o in first]


def test_different_keys_create_two_hosts(world, order_hosts):
    first = order_hosts(1, idempotency_key="a")
    second = order_hosts(1, idempotency_key="b")

    assert first[0].pk != second[0].pk
    assert Instance.objects.filter(state=InstanceState.RUNNING).count() == 2
    assert world.free_accelerators() == 14


def test_no_key_creates_a_host_each_time(world, order_hosts):
    order_hosts(1)
    order_hosts(1)

    assert Instance.objects.count() == 2


def test_keys_are_per_organization(world, order_hosts, other_organization, other_owner):
    type(other_organization).objects.filter(pk=other_organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    other_organization.refresh_from_db()
    (mine,) = order_hosts(1, idempotency_key="same")

    (theirs,) = submit_create(
        organization=other_organization,
        actor=other_owner,
        request=world.request(1),
        idempotency_key="same",
    )

    assert theirs.pk != mine.pk
    assert theirs.organization == other_organization


def test_a_key_is_not_confused_with_a_longer_key(world, order_hosts):
    (other,) = order_hosts(1, idempotency_key="job:7")

    (order,) = order_hosts(1, idempotency_key="job")

    assert order.pk != other.pk
    assert Instance.objects.count() == 2


# --- roles -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["viewer", "billing"])
def test_roles_that_cannot_order(world, member_of, role):
    user = member_of(world.organization, role)
    before = row_counts()

    with pytest.raises(PermissionDenied):
        submit_create(organization=world.organization, actor=user, request=world.request(1))

    assert row_counts() == before


def test_an_outsider_cannot_order(world, other_owner):
    with pytest.raises(PermissionDenied):
        submit_create(organization=world.organization, actor=other_owner, request=world.request(1))


@pytest.mark.parametrize("role", ["owner", "admin", "member"])
def test_roles_that_may_order(world, order_hosts, member_of, role):
    (order,) = order_hosts(1, actor=member_of(world.organization, role))

    assert order.state == OrderState.DONE


# --- the approval policy ---------------------------------------------------------------------


def unverify(organization):
    type(organization).objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.UNVERIFIED
    )
    organization.refresh_from_db()


def policy(park, **values):
    fields = {"unverified_needs_approval": True, "max_accelerators": None, "max_hourly_minor": None}
    return ApprovalPolicy.objects.update_or_create(park=park, defaults={**fields, **values})[0]


@pytest.fixture
def waiting(world, order_hosts):
    """A create order of an unverified organization, waiting for an operator."""
    unverify(world.organization)
    (order,) = order_hosts(2)
    assert order.state == OrderState.AWAITING_APPROVAL
    return order


def test_an_unverified_organization_waits_for_approval(world, waiting, owner):
    instance = Instance.objects.get(pk=waiting.instance_id)
    assert instance.state == InstanceState.PENDING
    assert instance.node is None and instance.pool is None
    assert not Allocation.objects.exists()
    assert not Placement.objects.exists()
    assert world.free_accelerators() == 16
    # The waiting host holds its quota, so the approval cannot be overtaken.
    assert organization_usage(world.organization) == holding(world, 2)
    assert actions_for(waiting) == ["order.submitted", "order.awaiting_approval"]
    event = AuditEvent.objects.get(action="order.awaiting_approval")
    assert event.actor == owner


def test_a_policy_may_let_unverified_organizations_order(world, order_hosts):
    unverify(world.organization)
    policy(world.park, unverified_needs_approval=False)

    (order,) = order_hosts(1)

    assert order.state == OrderState.DONE


@pytest.mark.parametrize(
    ("accelerators", "count", "waits"), [(4, 1, False), (8, 1, True), (4, 2, True), (2, 2, False)]
)
def test_orders_above_max_accelerators_wait(world, order_hosts, accelerators, count, waits):
    policy(world.park, max_accelerators=4)

    orders = order_hosts(accelerators, count=count)

    expected = OrderState.AWAITING_APPROVAL if waits else OrderState.DONE
    assert [o.state for o in orders] == [expected] * count


@pytest.mark.parametrize(
    ("bandwidth_mbps", "count", "waits"), [(0, 1, False), (1, 1, True), (0, 2, True)]
)
def test_orders_above_max_hourly_price_wait(world, order_hosts, bandwidth_mbps, count, waits):
    policy(world.park, max_hourly_minor=2000)  # a 2-card host costs exactly 2000 an hour

    orders = order_hosts(2, bandwidth_mbps=bandwidth_mbps, count=count)

    expected = OrderState.AWAITING_APPROVAL if waits else OrderState.DONE
    assert [o.state for o in orders] == [expected] * count


def test_set_approval_policy_is_for_the_parks_operators(world, operator, owner):
    with pytest.raises(PermissionDenied):
        set_approval_policy(
            park=world.park,
            operator=owner,
            unverified_needs_approval=False,
            max_accelerators=None,
            max_hourly_minor=None,
        )

    saved = set_approval_policy(
        park=world.park,
        operator=operator,
        unverified_needs_approval=False,
        max_accelerators=2,
        max_hourly_minor=None,
    )

    assert ApprovalPolicy.objects.get(park=world.park) == saved
    assert saved.max_accelerators == 2
    assert AuditEvent.objects.filter(action="park.approval_policy", actor=operator).exists()


def test_the_parks_operator_approves_and_the_host_is_provisioned(
    world, waiting, operator, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        approve_order(order=waiting, operator=operator)

    approved = Order.objects.get(pk=waiting.pk)
    assert approved.state == OrderState.DONE
    assert approved.decided_by == operator
    assert approved.decided_at is not None
    instance = Instance.objects.get(pk=waiting.instance_id)
    assert instance.state == InstanceState.RUNNING
    assert Accelerator.objects.filter(allocation__workload__instance=instance).count() == 2
    assert Placement.objects.filter(workload__instance__orders=waiting).count() == 1
    assert world.free_accelerators() == 14
    assert organization_usage(world.organization) == holding(world, 2)
    assert AuditEvent.objects.get(action="order.approved").actor == operator


def test_approval_when_capacity_is_gone_fails_the_order_and_gives_quota_back(
    world, waiting, operator, other_organization, other_owner
):
    type(other_organization).objects.filter(pk=other_organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    other_organization.refresh_from_db()
    submit_create(
        organization=other_organization,
        actor=other_owner,
        request=world.request(8, count=2),  # both nodes, whole
    )
    assert world.free_accelerators() == 0

    decided = approve_order(order=waiting, operator=operator)

    assert decided.state == OrderState.FAILED
    assert "No host has 2 free" in decided.reason
    assert decided.decided_by == operator  # the approval itself stays recorded
    instance = Instance.objects.get(pk=waiting.instance_id)
    assert instance.state == InstanceState.RELEASED
    assert instance.released_at is not None
    assert not Allocation.objects.filter(workload__instance=instance).exists()
    assert organization_usage(world.organization) == Usage()
    assert actions_for(waiting)[-2:] == ["order.approved", "order.failed"]


def test_rejection_needs_a_reason(world, waiting, operator):
    for reason in ("", "   "):
        with pytest.raises(DomainError) as excinfo:
            reject_order(order=waiting, operator=operator, reason=reason)
        assert excinfo.value.code == "reason_required"

    assert Order.objects.get(pk=waiting.pk).state == OrderState.AWAITING_APPROVAL
    assert organization_usage(world.organization) == holding(world, 2)


def test_rejection_releases_the_host_and_its_quota(world, waiting, operator):
    rejected = reject_order(order=waiting, operator=operator, reason="  Verify first.  ")

    assert rejected.state == OrderState.REJECTED
    assert rejected.reason == "Verify first."
    assert rejected.decided_by == operator
    instance = Instance.objects.get(pk=waiting.instance_id)
    assert instance.state == InstanceState.RELEASED
    assert organization_usage(world.organization) == Usage()
    assert AuditEvent.objects.get(action="order.rejected").data["reason"] == "Verify first."


@pytest.mark.parametrize("role", ["owner", "member"])
def test_the_tenant_cancels_a_waiting_order(world, waiting, member_of, role):
    cancelled = cancel_order(order=waiting, actor=member_of(world.organization, role))

    assert cancelled.state == OrderState.CANCELLED
    assert Instance.objects.get(pk=waiting.instance_id).state == InstanceState.RELEASED
    assert organization_usage(world.organization) == Usage()


def test_a_viewer_or_an_outsider_cannot_cancel(world, waiting, viewer, other_owner):
    for actor in (viewer, other_owner):
        with pytest.raises(PermissionDenied):
            cancel_order(order=waiting, actor=actor)

    assert Order.objects.get(pk=waiting.pk).state == OrderState.AWAITING_APPROVAL


def test_a_running_hosts_order_cannot_be_cancelled(world, order_hosts, owner):
    (order,) = order_hosts(1)

    with pytest.raises(InvalidTransition):
        cancel_order(order=order, actor=owner)

    assert Instance.objects.get(pk=order.instance_id).state == InstanceState.RUNNING


def test_only_this_parks_operators_decide(world, waiting, owner):
    stranger = UserFactory()
    ParkOperatorFactory(park=ParkFactory(), user=stranger)

    for actor in (stranger, owner):
        with pytest.raises(PermissionDenied):
            approve_order(order=waiting, operator=actor)
        with pytest.raises(PermissionDenied):
            reject_order(order=waiting, operator=actor, reason="no")

    assert Order.objects.get(pk=waiting.pk).state == OrderState.AWAITING_APPROVAL
    assert not Allocation.objects.exists()


def test_a_decided_order_cannot_be_decided_again(world, waiting, operator):
    reject_order(order=waiting, operator=operator, reason="no")

    with pytest.raises(InvalidTransition):
        approve_order(order=Order.objects.get(pk=waiting.pk), operator=operator)

    assert not Allocation.objects.exists()


# --- quota refusals --------------------------------------------------------------------------

ACCELERATORS = "Accelerators (all models)"


def quota_refusal(world, owner, request):
    before, free = row_counts(), world.free_accelerators()
    with pytest.raises(QuotaExceeded) as excinfo:
        submit_create(organization=world.organization, actor=owner, request=request)
    assert excinfo.value.code == "quota_exceeded"
    assert row_counts() == before
    assert world.free_accelerators() == free
    return excinfo.value.message


@pytest.mark.parametrize(
    ("resource", "limit", "label", "numbers"),
    [
        (QuotaResource.ACCELERATORS, 2, ACCELERATORS, ("1", "2", "2")),
        (QuotaResource.VCPU, 40, "vCPU", ("16", "32", "40")),
        (QuotaResource.RAM_GB, 300, "RAM (GB)", ("128", "256", "300")),
        (QuotaResource.DISK_GB, 200, "Disk (GB)", ("100", "150", "200")),
        (QuotaResource.INSTANCES, 1, "Instances", ("1", "1", "1")),
    ],
)
def test_quota_exceeded_names_the_resource_and_the_numbers(
    world, running_host, owner, resource, limit, label, numbers
):
    running_host(1)  # holds 1 card, 16 vCPU, 128 GB RAM, 100 GB disk, 1 instance
    world.set_limit(resource, limit)

    message = quota_refusal(world, owner, world.request(2, data_disk_gb=50))

    used, wanted, most = numbers
    assert (
        f"Over your organization's quota for {label}: {used} in use + {wanted} asked exceeds "
        f"the limit of {most}."
    ) in message


def test_quota_for_one_accelerator_model(world, running_host, owner):
    running_host(1)
    world.set_limit(QuotaResource.MODEL_ACCELERATORS, 2, model=world.model)

    message = quota_refusal(world, owner, world.request(2))

    assert f"quota for {world.model}: 1 in use + 2 asked exceeds the limit of 2" in message


def test_a_limit_on_another_model_does_not_apply(world, order_hosts):
    world.set_limit(QuotaResource.MODEL_ACCELERATORS, 0, model=AcceleratorModelFactory())

    (order,) = order_hosts(2)

    assert order.state == OrderState.DONE


def test_quota_for_compute_units(world, running_host, owner):
    running_host(1)  # 3.12 units
    world.set_limit(QuotaResource.COMPUTE_UNITS, 9)

    message = quota_refusal(world, owner, world.request(2))  # 6.24 more: 9.36 > 9

    assert "quota for Normalized compute units:" in message
    assert re.search(r": 3\.120? in use \+ 6\.24 asked exceeds the limit of 9\.", message), message


def test_hosts_of_one_order_count_together(world, owner):
    world.set_limit(QuotaResource.ACCELERATORS, 2)

    message = quota_refusal(world, owner, world.request(1, count=3))

    assert "0 in use + 3 asked exceeds the limit of 2" in message


def test_exactly_at_the_limit_is_allowed(world, running_host, order_hosts):
    running_host(2)
    world.set_limit(QuotaResource.ACCELERATORS, 6)
    world.set_limit(QuotaResource.INSTANCES, 2)

    (order,) = order_hosts(4)

    assert order.state == OrderState.DONE
    assert organization_usage(world.organization).accelerators == 6


@pytest.mark.parametrize(
    ("resource", "limit", "label"),
    [
        (QuotaResource.ACCELERATORS, 3, ACCELERATORS),
        (QuotaResource.MODEL_ACCELERATORS, 3, None),
        (QuotaResource.INSTANCES, 2, "Instances"),
    ],
)
def test_park_limits_count_every_organization(
    world, running_host, owner, other_organization, resource, limit, label
):
    running_host(1)
    InstanceFactory(  # another tenant's host in the park holds 1 card and 1 instance
        organization=other_organization, flavor=world.flavors[1], image=world.image, running=True
    )
    model = world.model if resource == QuotaResource.MODEL_ACCELERATORS else None
    world.set_limit(resource, limit, organization=False, model=model)

    message = quota_refusal(world, owner, world.request(2))

    wanted = 1 if resource == QuotaResource.INSTANCES else 2
    assert (
        f"The park's capacity limit for {label or world.model} is reached "
        f"(2 in use + {wanted} asked, limit {limit})."
    ) in message


def test_quota_is_checked_before_capacity(world, owner):
    for node in world.nodes:
        node.is_drained = True
        node.save()
    world.set_limit(QuotaResource.ACCELERATORS, 1)

    quota_refusal(world, owner, world.request(2))


# --- capacity refusals -----------------------------------------------------------------------


def test_no_capacity_when_no_node_fits(world, order_hosts, owner):
    world.set_limit(QuotaResource.ACCELERATORS, 100)
    order_hosts(4)
    order_hosts(4)
    order_hosts(4)  # best-fit: node-a is full, node-b has 4 free
    assert world.free_accelerators() == 4
    before = row_counts()

    with pytest.raises(NoCapacity) as excinfo:
        submit_create(organization=world.organization, actor=owner, request=world.request(8))

    assert excinfo.value.code == "no_capacity"
    assert f"No host has 8 free {world.model} accelerators in Center" in excinfo.value.message
    assert row_counts() == before
    assert organization_usage(world.organization) == holding(world, 4, instances=3)


def test_no_capacity_for_the_second_host_refuses_the_whole_order(world, order_hosts, owner):
    world.set_limit(QuotaResource.ACCELERATORS, 100)
    order_hosts(4)  # node-a keeps 4 free, node-b 8
    before = row_counts()

    with pytest.raises(NoCapacity):
        submit_create(
            organization=world.organization, actor=owner, request=world.request(8, count=2)
        )

    assert row_counts() == before
    assert world.free_accelerators() == 12


# --- quota given back ------------------------------------------------------------------------


def test_a_host_that_never_ran_holds_nothing_after_rejection_or_cancellation(
    world, order_hosts, operator, owner
):
    unverify(world.organization)
    first, second = order_hosts(1, count=2)
    assert organization_usage(world.organization) == holding(world, 1, instances=2)

    reject_order(order=first, operator=operator, reason="no")
    cancel_order(order=second, actor=owner)

    assert organization_usage(world.organization) == Usage()
    # The limits are free again: the full quota can be ordered (and waits, unverified).
    orders = order_hosts(8, count=2)
    assert [o.state for o in orders] == [OrderState.AWAITING_APPROVAL] * 2


def test_the_tenants_preference_reaches_the_scheduler(world, owner):
    request = world.request(1, preference="green")

    [order] = submit_create(organization=world.organization, actor=owner, request=request)

    assert order.parameters["preference"] == "green"
    assert Placement.objects.get(workload=order.instance.workload).weights["preference"] == "green"
