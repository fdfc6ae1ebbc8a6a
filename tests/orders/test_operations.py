"""Lifecycle operations through request_operation: stop, start, resize within the family, expand
the disk, change bandwidth, release; and every refusal, with nothing changed."""

import pytest
from django.core.exceptions import ValidationError

from apps.billing.models import Wallet
from apps.billing.services import InsufficientFunds
from apps.core.errors import DomainError, InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import NoCapacity
from apps.orders.models import Instance, InstanceState, Order, OrderState
from apps.orders.operations import request_operation
from apps.orders.tasks import fulfil_order
from apps.quotas.models import QuotaResource
from apps.quotas.services import QuotaExceeded, Usage, organization_usage
from tests.factories import ApiKeyFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


def reload(instance) -> Instance:
    return Instance.objects.select_related("flavor", "node").get(pk=instance.pk)


def devices(instance) -> list[int]:
    return list(
        Accelerator.objects.filter(
            allocation__workload__instance=instance, allocation__released_at__isnull=True
        )
        .order_by("index")
        .values_list("index", flat=True)
    )


def live_allocation(instance) -> Allocation:
    return Allocation.objects.get(workload__instance=instance, released_at__isnull=True)


def live_allocation_or_none(instance) -> Allocation | None:
    return Allocation.objects.filter(workload__instance=instance, released_at__isnull=True).first()


def actions_for(obj):
    return list(
        AuditEvent.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk))
        .order_by("id")
        .values_list("action", flat=True)
    )


def snapshot(instance):
    """Everything an operation could change, to check a refusal changed nothing."""
    instance = reload(instance)
    allocation = live_allocation_or_none(instance)
    return (
        instance.state,
        instance.flavor_id,
        instance.data_disk_gb,
        instance.bandwidth_mbps,
        instance.node_id,
        devices(instance),
        (allocation.vcpu, allocation.ram_gb) if allocation else None,
        Order.objects.count(),
        organization_usage(instance.organization),
    )


DONE_ORDER = ["order.submitted", "order.approved", "order.fulfilling", "order.done"]


# --- stop and start --------------------------------------------------------------------------


def test_stop(world, running_host, operate, owner):
    instance = running_host(2)
    usage = organization_usage(world.organization)

    order = operate(instance, "stop")

    assert order.state == OrderState.DONE
    assert order.kind == "stop"
    assert order.created_by == owner
    assert reload(instance).state == InstanceState.STOPPED
    # A stopped host gives its accelerators, CPU and memory back to its node (it pays for its
    # disks only) and keeps its quota (it can be started again).
    assert devices(instance) == []
    assert live_allocation_or_none(instance) is None
    assert world.free_accelerators() == 16
    assert organization_usage(world.organization) == usage
    assert actions_for(order) == DONE_ORDER
    assert actions_for(instance)[-2:] == ["instance.stopping", "instance.stopped"]
    submitted = AuditEvent.objects.get(action="order.submitted", object_id=str(order.pk))
    assert submitted.actor == owner
    assert submitted.data["kind"] == "stop"


def test_stop_before_the_backend_answers(world, running_host, operate):
    instance = running_host(1)

    order = operate(instance, "stop", run_tasks=False)

    assert order.state == OrderState.FULFILLING
    assert reload(instance).state == InstanceState.STOPPING


def test_stop_keeps_the_accelerators_until_the_backend_has_stopped(world, running_host, operate):
    instance = running_host(2)

    operate(instance, "stop", run_tasks=False)

    assert len(devices(instance)) == 2


def test_start(world, running_host, operate):
    instance = running_host(1)
    node = reload(instance).node
    operate(instance, "stop")

    order = operate(instance, "start", run_tasks=False)

    # The accelerators are taken again when the start is requested, on the host's own node.
    assert len(devices(instance)) == 1
    assert live_allocation(instance).node == node
    assert (live_allocation(instance).vcpu, live_allocation(instance).ram_gb) == (16, 128)
    fulfil_order.delay(order.pk)
    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert reload(instance).state == InstanceState.RUNNING
    assert reload(instance).node == node
    assert actions_for(instance)[-2:] == ["instance.starting", "instance.running"]
    assert world.free_accelerators() == 15


def test_start_is_refused_when_the_node_gave_its_cards_to_other_work(
    world, running_host, operate, owner
):
    world.set_limit(QuotaResource.ACCELERATORS, 24)
    instance = running_host(8, name="stopped")
    running_host(8, name="filler")  # the other node is full
    operate(instance, "stop")
    node = reload(instance).node
    other = running_host(8, name="taker")  # takes the cards the stopped host gave back
    assert reload(other).node == node
    before = snapshot(instance)

    with pytest.raises(NoCapacity) as excinfo:
        request_operation(instance=instance, actor=owner, kind="start")

    assert "no room to start stopped" in excinfo.value.message
    assert "it needs 8 free accelerators and 0 are free" in excinfo.value.message
    assert snapshot(instance) == before
    assert not Order.objects.filter(instance=instance, kind="start").exists()


# --- resize ----------------------------------------------------------------------------------


def test_resize_up_takes_the_accelerators_when_requested(world, running_host, operate):
    instance = running_host(1)

    order = operate(instance, "resize", run_tasks=False, flavor=world.flavors[4])

    assert order.state == OrderState.FULFILLING
    assert order.parameters == {
        "from": "g1.1x",
        "to": "g1.4x",
        "resume": "running",
        "flavor_hourly_minor": 4000,  # the new size's price, fixed now
    }
    pending = reload(instance)
    assert pending.state == InstanceState.RESIZING
    assert pending.flavor == world.flavors[1]  # the flavor changes when the backend is done
    assert len(devices(instance)) == 4
    assert (live_allocation(instance).vcpu, live_allocation(instance).ram_gb) == (64, 512)
    assert world.free_accelerators() == 12
    # The open order holds the growth: the organization uses as much as a 4-card host.
    assert organization_usage(world.organization).accelerators == 4
    assert organization_usage(world.organization).vcpu == 64


def test_resize_up(world, running_host, operate):
    instance = running_host(1)
    node = reload(instance).node

    order = operate(instance, "resize", flavor=world.flavors[4])

    assert order.state == OrderState.DONE
    resized = reload(instance)
    assert resized.state == InstanceState.RUNNING
    assert resized.flavor == world.flavors[4]
    assert resized.node == node  # grows in place
    assert len(devices(instance)) == 4
    assert world.free_accelerators(node) == 4
    assert world.free_accelerators() == 12
    usage = organization_usage(world.organization)
    assert (usage.accelerators, usage.vcpu, usage.ram_gb, usage.instances) == (4, 64, 512, 1)
    assert actions_for(instance)[-2:] == ["instance.resizing", "instance.running"]


def test_resize_down(world, running_host, operate):
    instance = running_host(4)

    pending = operate(instance, "resize", run_tasks=False, flavor=world.flavors[1])
    # A shrink gives nothing back until the backend has done it.
    assert len(devices(instance)) == 4
    assert organization_usage(world.organization).accelerators == 4

    fulfil_order.delay(pending.pk)

    assert Order.objects.get(pk=pending.pk).state == OrderState.DONE
    resized = reload(instance)
    assert resized.flavor == world.flavors[1]
    assert resized.state == InstanceState.RUNNING
    assert devices(instance) == [0]
    assert (live_allocation(instance).vcpu, live_allocation(instance).ram_gb) == (16, 128)
    assert world.free_accelerators() == 15
    usage = organization_usage(world.organization)
    assert (usage.accelerators, usage.vcpu, usage.ram_gb) == (1, 16, 128)


def test_resize_a_stopped_host_leaves_it_stopped(world, running_host, operate):
    instance = running_host(2)
    operate(instance, "stop")

    order = operate(instance, "resize", flavor=world.flavors[8])

    assert order.parameters["resume"] == "stopped"
    resized = reload(instance)
    assert resized.state == InstanceState.STOPPED
    assert resized.flavor == world.flavors[8]
    assert devices(instance) == []  # a stopped host holds no cards: it takes 8 at its start
    operate(instance, "start")
    assert len(devices(instance)) == 8


def test_resize_to_another_family_is_refused(world, running_host, owner, other_family):
    instance = running_host(1)
    before = snapshot(instance)

    with pytest.raises(DomainError) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="resize", params={"flavor": other_family}
        )

    assert excinfo.value.code == "wrong_family"
    assert "g2.2x" in excinfo.value.message and "g1.1x" in excinfo.value.message
    assert snapshot(instance) == before


@pytest.mark.parametrize("target", ["same", "inactive", "missing", "code"])
def test_resize_needs_another_size_on_sale(world, running_host, owner, target):
    instance = running_host(1)
    params = {
        "same": {"flavor": world.flavors[1]},
        "inactive": {"flavor": world.flavors[2]},
        "missing": {},
        "code": {"flavor": "g1.2x"},
    }[target]
    if target == "inactive":
        world.flavors[2].is_active = False
        world.flavors[2].save()
    before = snapshot(instance)

    with pytest.raises(ValidationError) as excinfo:
        request_operation(instance=instance, actor=owner, kind="resize", params=params)

    assert list(excinfo.value.message_dict) == ["flavor"]
    assert snapshot(instance) == before


def test_resize_up_over_quota_changes_nothing(world, running_host, owner):
    instance = running_host(1)
    world.set_limit(QuotaResource.ACCELERATORS, 3)
    before = snapshot(instance)

    with pytest.raises(QuotaExceeded) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="resize", params={"flavor": world.flavors[4]}
        )

    assert "1 in use + 3 asked exceeds the limit of 3" in excinfo.value.message
    assert snapshot(instance) == before
    assert world.free_accelerators() == 15


def test_a_resize_needs_a_balance_to_run_on(world, running_host, owner):
    instance = running_host(1)
    Wallet.objects.filter(organization=instance.organization).update(balance_minor=0)
    before = snapshot(instance)

    with pytest.raises(InsufficientFunds, match="Not enough balance"):
        request_operation(
            instance=instance, actor=owner, kind="resize", params={"flavor": world.flavors[2]}
        )

    assert snapshot(instance) == before


def test_a_resize_over_quota_and_without_money_is_refused_for_the_quota_first(
    world, running_host, owner
):
    """The reservation path's declared order, as an order's: quota, then funds."""
    instance = running_host(1)
    world.set_limit(QuotaResource.ACCELERATORS, 3)
    Wallet.objects.filter(organization=instance.organization).update(balance_minor=0)

    with pytest.raises(QuotaExceeded, match="1 in use \\+ 3 asked exceeds the limit of 3"):
        request_operation(
            instance=instance, actor=owner, kind="resize", params={"flavor": world.flavors[4]}
        )


def test_a_pending_resize_holds_its_growth_against_new_orders(
    world, running_host, operate, order_hosts
):
    instance = running_host(1)
    operate(instance, "resize", run_tasks=False, flavor=world.flavors[8])  # 8 of 16 held
    order_hosts(8, name="second")  # 16 of 16

    with pytest.raises(QuotaExceeded) as excinfo:
        order_hosts(1, name="third")

    assert "16 in use + 1 asked exceeds the limit of 16" in excinfo.value.message


def test_resize_down_needs_no_quota(world, running_host, operate):
    instance = running_host(4)
    world.set_limit(QuotaResource.ACCELERATORS, 0)

    order = operate(instance, "resize", flavor=world.flavors[2])

    assert order.state == OrderState.DONE
    assert len(devices(instance)) == 2


def test_resize_without_room_on_the_node_changes_nothing(world, running_host, owner):
    first = running_host(4, name="first")
    second = running_host(4, name="second")  # best-fit: the same node, now full
    assert reload(first).node == reload(second).node
    before = snapshot(first)

    with pytest.raises(NoCapacity) as excinfo:
        request_operation(
            instance=first, actor=owner, kind="resize", params={"flavor": world.flavors[8]}
        )

    node = reload(first).node.hostname
    assert f"The host {node} does not have room to grow this instance to 8" in (
        excinfo.value.message
    )
    assert snapshot(first) == before
    assert world.free_accelerators() == 8  # the other node is empty, but a host stays put


# --- disk and bandwidth ----------------------------------------------------------------------


def test_expand_disk(world, running_host, operate):
    instance = running_host(1)

    order = operate(instance, "expand_disk", data_disk_gb=500)

    assert order.state == OrderState.DONE
    assert order.parameters == {"from": 0, "to": 500}
    assert reload(instance).data_disk_gb == 500
    assert reload(instance).state == InstanceState.RUNNING
    assert organization_usage(world.organization).disk_gb == 600


def test_expand_disk_holds_the_growth_while_pending(world, running_host, operate):
    instance = running_host(1)

    order = operate(instance, "expand_disk", run_tasks=False, data_disk_gb="300")

    assert order.state == OrderState.FULFILLING
    assert reload(instance).state == InstanceState.RUNNING  # no transitional state
    assert reload(instance).data_disk_gb == 0
    assert organization_usage(world.organization).disk_gb == 400


@pytest.mark.parametrize(("size", "field"), [(400, "data_disk_gb"), (500, "data_disk_gb")])
def test_a_disk_only_grows(world, running_host, operate, owner, size, field):
    instance = running_host(1)
    operate(instance, "expand_disk", data_disk_gb=500)
    before = snapshot(instance)

    with pytest.raises(ValidationError) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="expand_disk", params={"data_disk_gb": size}
        )

    assert list(excinfo.value.message_dict) == [field]
    assert "500" in excinfo.value.message_dict[field][0]
    assert snapshot(instance) == before


@pytest.mark.parametrize("size", [32769, "lots", None])
def test_expand_disk_needs_a_whole_number_within_the_maximum(world, running_host, owner, size):
    instance = running_host(1)
    before = snapshot(instance)

    with pytest.raises(ValidationError) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="expand_disk", params={"data_disk_gb": size}
        )

    assert list(excinfo.value.message_dict) == ["data_disk_gb"]
    assert snapshot(instance) == before


def test_expand_disk_over_quota(world, running_host, owner):
    instance = running_host(1)
    world.set_limit(QuotaResource.DISK_GB, 300)
    before = snapshot(instance)

    with pytest.raises(QuotaExceeded) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="expand_disk", params={"data_disk_gb": 201}
        )

    assert "100 in use + 201 asked exceeds the limit of 300" in excinfo.value.message
    assert snapshot(instance) == before


def test_set_bandwidth(world, running_host, operate):
    instance = running_host(1, bandwidth_mbps=10)

    order = operate(instance, "set_bandwidth", bandwidth_mbps=100)

    assert order.state == OrderState.DONE
    assert order.parameters == {"from": 10, "to": 100}
    assert reload(instance).bandwidth_mbps == 100

    operate(instance, "set_bandwidth", bandwidth_mbps=0)
    assert reload(instance).bandwidth_mbps == 0


@pytest.mark.parametrize("mbps", [-1, 10001, 10, "fast"])
def test_set_bandwidth_refusals(world, running_host, owner, mbps):
    instance = running_host(1, bandwidth_mbps=10)
    before = snapshot(instance)

    with pytest.raises(ValidationError) as excinfo:
        request_operation(
            instance=instance, actor=owner, kind="set_bandwidth", params={"bandwidth_mbps": mbps}
        )

    assert list(excinfo.value.message_dict) == ["bandwidth_mbps"]
    assert snapshot(instance) == before


# --- release ---------------------------------------------------------------------------------


def test_release_gives_accelerators_and_quota_back(world, running_host, operate):
    instance = running_host(4, data_disk_gb=200)
    allocation = live_allocation(instance)
    assert world.free_accelerators() == 12

    order = operate(instance, "release")

    assert order.state == OrderState.DONE
    released = reload(instance)
    assert released.state == InstanceState.RELEASED
    assert released.released_at is not None
    allocation.refresh_from_db()
    assert allocation.released_at is not None
    assert not Accelerator.objects.filter(allocation=allocation).exists()
    assert world.free_accelerators() == world.total_accelerators() == 16
    assert organization_usage(world.organization) == Usage()
    assert actions_for(instance)[-2:] == ["instance.releasing", "instance.released"]


def test_release_a_stopped_host(world, running_host, operate):
    instance = running_host(2)
    operate(instance, "stop")

    operate(instance, "release")

    assert reload(instance).state == InstanceState.RELEASED
    assert organization_usage(world.organization) == Usage()
    assert world.free_accelerators() == 16


def test_released_quota_can_be_ordered_again(world, running_host, operate, order_hosts):
    first = running_host(8, name="first")
    running_host(8, name="second")
    with pytest.raises(QuotaExceeded):
        order_hosts(1, name="third")

    operate(first, "release")

    (order,) = order_hosts(8, name="third")
    assert order.state == OrderState.DONE


# --- state and concurrency refusals ----------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "kind", "params"),
    [
        (["stop"], "stop", {}),
        ([], "start", {}),
        (["release"], "stop", {}),
        (["release"], "start", {}),
        (["release"], "release", {}),
        (["release"], "expand_disk", {"data_disk_gb": 500}),
        (["release"], "set_bandwidth", {"bandwidth_mbps": 5}),
        (["release"], "resize", {"flavor": "2"}),
    ],
    ids=[
        "stop-stopped",
        "start-running",
        "stop-released",
        "start-released",
        "release-released",
        "disk-released",
        "bandwidth-released",
        "resize-released",
    ],
)
def test_an_operation_in_the_wrong_state(world, running_host, operate, owner, setup, kind, params):
    instance = running_host(1)
    for step in setup:
        operate(instance, step)
    if params.get("flavor"):
        params = {"flavor": world.flavors[int(params["flavor"])]}
    before = snapshot(instance)

    with pytest.raises(InvalidTransition) as excinfo:
        request_operation(instance=instance, actor=owner, kind=kind, params=params)

    assert excinfo.value.code == "invalid_transition"
    assert excinfo.value.message.startswith(f"{instance.name} is ")
    assert snapshot(instance) == before


@pytest.mark.parametrize(
    ("first", "first_params"),
    [("expand_disk", {"data_disk_gb": 300}), ("set_bandwidth", {"bandwidth_mbps": 50})],
)
@pytest.mark.parametrize("second", ["set_bandwidth", "expand_disk", "stop", "release"])
def test_one_operation_at_a_time(world, running_host, operate, owner, first, first_params, second):
    instance = running_host(1)
    pending = operate(instance, first, run_tasks=False, **first_params)  # its task never runs
    assert pending.state == OrderState.FULFILLING
    assert reload(instance).state == InstanceState.RUNNING
    before = snapshot(instance)

    with pytest.raises(InvalidTransition) as excinfo:
        request_operation(
            instance=instance,
            actor=owner,
            kind=second,
            params={"data_disk_gb": 400, "bandwidth_mbps": 70},
        )

    assert "has an operation in progress" in excinfo.value.message
    assert snapshot(instance) == before


def test_a_second_operation_while_stopping(world, running_host, operate, owner):
    instance = running_host(1)
    operate(instance, "stop", run_tasks=False)

    with pytest.raises(InvalidTransition):
        request_operation(instance=instance, actor=owner, kind="release")

    assert reload(instance).state == InstanceState.STOPPING


# --- roles -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "kind", "allowed"),
    [
        ("viewer", "stop", False),
        ("viewer", "release", False),
        ("billing", "stop", False),
        ("billing", "release", False),
        ("member", "stop", True),
        ("member", "release", True),
        ("admin", "release", True),
        ("owner", "stop", True),
    ],
)
def test_who_may_operate(world, running_host, operate, member_of, role, kind, allowed):
    instance = running_host(1)
    user = member_of(world.organization, role)

    if allowed:
        assert operate(instance, kind, actor=user).state == OrderState.DONE
        assert AuditEvent.objects.filter(action="order.submitted", actor=user).exists()
    else:
        before = snapshot(instance)
        with pytest.raises(PermissionDenied):
            operate(instance, kind, actor=user)
        assert snapshot(instance) == before


def test_an_outsider_cannot_operate(world, running_host, other_owner, owner):
    instance = running_host(1)

    with pytest.raises(PermissionDenied):
        request_operation(instance=instance, actor=other_owner, kind="release")


@pytest.mark.parametrize(("scope", "allowed"), [("read", False), ("write", True)])
def test_api_keys_operate_within_their_scope(world, running_host, operate, scope, allowed):
    instance = running_host(1)
    key = ApiKeyFactory(organization=world.organization, scope=scope)

    if allowed:
        order = operate(instance, "stop", actor=key)
        assert order.state == OrderState.DONE
        assert order.created_by is None
        event = AuditEvent.objects.get(action="order.submitted", object_id=str(order.pk))
        assert event.actor_label == f"api-key:{key.prefix}"
    else:
        with pytest.raises(PermissionDenied):
            operate(instance, "stop", actor=key)


# --- idempotency -----------------------------------------------------------------------------


def test_an_operation_replayed_with_its_key_is_not_repeated(world, running_host, operate):
    instance = running_host(1)
    first = operate(instance, "stop", idempotency_key="stop-1")

    # The host is stopped now, so a real second stop would be refused; the replay is answered.
    again = operate(instance, "stop", idempotency_key="stop-1")

    assert again.pk == first.pk
    assert Order.objects.filter(kind="stop").count() == 1
    assert reload(instance).state == InstanceState.STOPPED


def test_a_replay_while_the_operation_is_in_progress(world, running_host, operate):
    instance = running_host(1)
    first = operate(instance, "expand_disk", run_tasks=False, idempotency_key="d", data_disk_gb=9)

    again = operate(instance, "expand_disk", idempotency_key="d", data_disk_gb=9)

    assert again.pk == first.pk
    assert Order.objects.filter(kind="expand_disk").count() == 1


def test_different_keys_are_different_operations(world, running_host, operate):
    instance = running_host(1)

    operate(instance, "set_bandwidth", idempotency_key="b1", bandwidth_mbps=5)
    operate(instance, "set_bandwidth", idempotency_key="b2", bandwidth_mbps=6)

    assert Order.objects.filter(kind="set_bandwidth", state=OrderState.DONE).count() == 2
    assert reload(instance).bandwidth_mbps == 6


# --- audit -----------------------------------------------------------------------------------


def test_every_operation_is_audited(world, running_host, operate, owner):
    instance = running_host(1)
    steps = [
        ("stop", {}, ["instance.stopping", "instance.stopped"]),
        ("start", {}, ["instance.starting", "instance.running"]),
        ("resize", {"flavor": world.flavors[2]}, ["instance.resizing", "instance.running"]),
        ("expand_disk", {"data_disk_gb": 50}, []),
        ("set_bandwidth", {"bandwidth_mbps": 20}, []),
        ("release", {}, ["instance.releasing", "instance.released"]),
    ]
    for kind, params, instance_actions in steps:
        seen = AuditEvent.objects.filter(object_type="orders.instance").count()
        order = operate(instance, kind, **params)

        assert actions_for(order) == DONE_ORDER, kind
        submitted = AuditEvent.objects.get(action="order.submitted", object_id=str(order.pk))
        assert submitted.actor == owner
        assert submitted.organization_id == world.organization.pk
        assert submitted.park_id == world.park.pk
        assert submitted.data["kind"] == kind
        new = list(
            AuditEvent.objects.filter(object_type="orders.instance")
            .order_by("id")
            .values_list("action", flat=True)[seen:]
        )
        assert new == instance_actions, kind
