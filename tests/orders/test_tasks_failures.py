"""Backend failures: injected permanent and transient errors, random failures at a rate and jobs
that lose a race for rows, after which the books still balance exactly (orders ended,
accelerators and quota held only by hosts that run, or by hosts in error the backend may still
run)."""

import contextlib
from types import SimpleNamespace

import psycopg.errors
import pytest
from django.db import OperationalError

from apps.core.contention import JOB_CONTENTION_RETRIES, job_retry_countdown
from apps.core.errors import InvalidTransition
from apps.core.models import AuditEvent
from apps.orchestration.backends import simulator
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import NoCapacity
from apps.orders import operations
from apps.orders.models import (
    ORDER_TERMINAL_STATES,
    Instance,
    InstanceState,
    Order,
    OrderState,
)
from apps.orders.services import fail_instance
from apps.orders.tasks import fulfil_order, provision_instance
from apps.quotas.models import QuotaResource
from apps.quotas.services import QuotaExceeded, Usage, demand_for, organization_usage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


@pytest.fixture(autouse=True)
def _clear_injected_failures():
    yield
    SimulatorDriver.clear_injected()


@pytest.fixture
def retrying_tasks(monkeypatch):
    """Eager tasks retry only when task errors do not propagate: with task_eager_propagates
    (tests/conftest.py) Celery re-raises the task's Retry instead of re-running it."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_eager_propagates", False)


def transient(n, message="slow"):
    return [BackendError(message, transient=True) for _ in range(n)]


def reload(instance) -> Instance:
    return Instance.objects.get(pk=instance.pk)


def live_devices(instance) -> int:
    return Accelerator.objects.filter(
        allocation__workload__instance=instance, allocation__released_at__isnull=True
    ).count()


def assert_gave_everything_back(world, instance):
    assert not Allocation.objects.filter(
        workload__instance=instance, released_at__isnull=True
    ).exists()
    assert not Accelerator.objects.filter(allocation__workload__instance=instance).exists()
    assert world.free_accelerators() == world.total_accelerators()
    assert organization_usage(world.organization) == Usage()


# --- provisioning ----------------------------------------------------------------------------


def test_a_permanent_failure_ends_the_host_in_error(world, order_hosts):
    SimulatorDriver.fail_next(BackendError("boom"))

    (order,) = order_hosts(4)

    assert order.state == OrderState.FAILED
    assert order.reason == "boom"
    instance = reload(order.instance)
    assert instance.state == InstanceState.ERROR
    assert instance.error_message == "boom"
    assert instance.backend_handle == ""
    assert_gave_everything_back(world, instance)
    error = AuditEvent.objects.get(action="instance.error", object_id=str(instance.pk))
    assert error.data == {"from": "provisioning", "to": "error", "error": "boom"}


def test_the_next_host_is_not_affected(world, order_hosts):
    SimulatorDriver.fail_next(BackendError("boom"))
    order_hosts(1, name="first")

    (order,) = order_hosts(1, name="second")

    assert order.state == OrderState.DONE
    assert reload(order.instance).state == InstanceState.RUNNING


def test_transient_failures_are_retried(world, order_hosts, retrying_tasks):
    SimulatorDriver.fail_next(*transient(2))

    (order,) = order_hosts(2)

    assert order.state == OrderState.DONE
    instance = reload(order.instance)
    assert instance.state == InstanceState.RUNNING
    assert instance.error_message == ""
    assert live_devices(instance) == 2


def test_transient_failures_give_up_after_the_last_retry(world, order_hosts, retrying_tasks):
    SimulatorDriver.fail_next(*transient(6, "still slow"))  # the first call and 5 retries

    (order,) = order_hosts(1)

    assert order.state == OrderState.FAILED
    instance = reload(order.instance)
    assert instance.state == InstanceState.ERROR
    assert instance.error_message == "still slow"
    assert_gave_everything_back(world, instance)


def test_five_transient_failures_are_still_retried(world, order_hosts, retrying_tasks):
    SimulatorDriver.fail_next(*transient(5))

    (order,) = order_hosts(1)

    assert order.state == OrderState.DONE


def test_a_duplicate_delivery_of_the_task_changes_nothing(world, running_host):
    instance = running_host(1)
    before = Instance.objects.values().get(pk=instance.pk)
    events = AuditEvent.objects.count()

    provision_instance.delay(instance.pk)

    assert Instance.objects.values().get(pk=instance.pk) == before
    assert AuditEvent.objects.count() == events


def test_failing_an_instance_twice_is_a_no_op(world, order_hosts):
    SimulatorDriver.fail_next(BackendError("boom"))
    (order,) = order_hosts(1)

    assert fail_instance(instance_id=order.instance_id, message="again") is None
    assert reload(order.instance).error_message == "boom"


# --- operations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("stop", {}),
        ("resize", {"flavor": 4}),
        ("resize", {"flavor": 1}),
        ("release", {}),
    ],
)
def test_a_failed_operation_leaves_the_host_in_error_holding_its_cards_until_released(
    world, running_host, operate, kind, params
):
    instance = running_host(2)
    if "flavor" in params:
        params = {"flavor": world.flavors[params["flavor"]]}
    SimulatorDriver.fail_next(BackendError(f"{kind} refused"))

    order = operate(instance, kind, **params)

    assert order.state == OrderState.FAILED
    assert order.reason == f"{kind} refused"
    failed = reload(instance)
    assert failed.state == InstanceState.ERROR
    assert failed.error_message == f"{kind} refused"
    assert failed.flavor == world.flavors[2]
    # The backend may still run the host: its cards stay taken (no one else gets them) until a
    # release is confirmed; its quota and wallet hold are given back at once.
    assert Allocation.objects.filter(workload__instance=instance, released_at__isnull=True).exists()
    assert world.free_accelerators() < world.total_accelerators()
    assert organization_usage(world.organization) == Usage()

    release = operate(failed, "release")

    assert release.state == OrderState.DONE
    assert reload(instance).state == InstanceState.RELEASED
    assert_gave_everything_back(world, instance)


def test_a_host_in_error_can_be_released(world, running_host, operate):
    instance = running_host(2)
    SimulatorDriver.fail_next(BackendError("stop refused"))
    operate(instance, "stop")

    order = operate(instance, "release")  # it was provisioned: the backend is asked to release

    assert order.state == OrderState.DONE
    assert reload(instance).state == InstanceState.RELEASED
    assert_gave_everything_back(world, instance)


def test_releasing_a_host_that_never_ran_does_not_call_the_backend(world, order_hosts, operate):
    SimulatorDriver.fail_next(BackendError("boom"))
    (order,) = order_hosts(1)
    SimulatorDriver.fail_next(BackendError("would fail if called"))

    release = operate(reload(order.instance), "release")

    assert release.state == OrderState.DONE
    assert reload(order.instance).state == InstanceState.RELEASED
    assert len(simulator._injected) == 1  # still waiting for a call that never came


def test_a_failed_disk_expansion_leaves_the_host_as_it_was(world, running_host, operate):
    instance = running_host(1)
    usage = organization_usage(world.organization)
    SimulatorDriver.fail_next(BackendError("no disk"))

    order = operate(instance, "expand_disk", data_disk_gb=500)

    assert order.state == OrderState.FAILED
    assert order.reason == "no disk"
    host = reload(instance)
    assert host.state == InstanceState.RUNNING
    assert host.data_disk_gb == 0
    assert host.error_message == ""
    assert live_devices(instance) == 1
    assert organization_usage(world.organization) == usage  # the growth is no longer held


def test_a_failed_bandwidth_change_leaves_the_host_as_it_was(world, running_host, operate):
    instance = running_host(1, bandwidth_mbps=10)
    SimulatorDriver.fail_next(BackendError("no bandwidth"))

    order = operate(instance, "set_bandwidth", bandwidth_mbps=100)

    assert order.state == OrderState.FAILED
    host = reload(instance)
    assert (host.state, host.bandwidth_mbps) == (InstanceState.RUNNING, 10)


def test_an_operation_retried_after_transient_failures(
    world, running_host, operate, retrying_tasks
):
    instance = running_host(1)
    SimulatorDriver.fail_next(*transient(2))

    order = operate(instance, "resize", flavor=world.flavors[2])

    assert order.state == OrderState.DONE
    assert reload(instance).flavor == world.flavors[2]
    assert live_devices(instance) == 2


def test_a_duplicate_delivery_of_an_operation_changes_nothing(world, running_host, operate):
    instance = running_host(1)
    order = operate(instance, "stop")
    events = AuditEvent.objects.count()

    fulfil_order.delay(order.pk)

    assert reload(instance).state == InstanceState.STOPPED
    assert AuditEvent.objects.count() == events


# --- failures at a rate ----------------------------------------------------------------------

HOSTS = 20


@pytest.fixture
def big_world(world):
    """Room for 24 cards on three nodes; quota for all of them and 20 hosts."""
    world.add_node("node-c")
    world.set_limit(QuotaResource.ACCELERATORS, 24)
    world.set_limit(QuotaResource.INSTANCES, HOSTS)
    return world


def use_backend_config(world, config):
    world.backend.config = config
    world.backend.save(update_fields=["config"])


@pytest.fixture
def one_random_stream(monkeypatch):
    """Every driver the tasks construct draws from one seeded stream, as a long-lived driver
    process would: the share of failing calls is then the configured rate."""

    def shared(seed):
        stream = simulator.random.Random(seed)
        monkeypatch.setattr(simulator, "random", SimpleNamespace(Random=lambda _seed: stream))

    return shared


def exercise(world, order_hosts, operate):
    """HOSTS create orders (every fifth of 2 cards), then operations on the hosts that run."""
    refused = []
    for n in range(HOSTS):
        try:
            order_hosts(2 if n % 5 == 4 else 1, name=f"host-{n}")
        except (NoCapacity, QuotaExceeded) as exc:
            refused.append(exc)
    hosts = list(Instance.objects.filter(state=InstanceState.RUNNING).order_by("pk"))
    plans = {
        0: [("stop", {}), ("start", {})],
        1: [("resize", {"flavor": world.flavors[2]})],
        2: [("release", {})],
        3: [("expand_disk", {"data_disk_gb": 50}), ("set_bandwidth", {"bandwidth_mbps": 5})],
        4: [("resize", {"flavor": world.flavors[1]})],
    }
    for n, host in enumerate(hosts):
        for kind, params in plans[n % 5]:
            if kind == "resize" and params["flavor"] == reload(host).flavor:
                continue
            try:
                operate(reload(host), kind, **params)
            except (NoCapacity, QuotaExceeded, InvalidTransition) as exc:
                refused.append(exc)
    # Release half of the hosts that ended in error (the other half stays in error).
    for host in Instance.objects.filter(state=InstanceState.ERROR).order_by("pk")[::2]:
        operate(host, "release")
    return refused


def assert_books_balance(world):
    orders = Order.objects.filter(organization=world.organization)
    assert orders.count() >= HOSTS
    assert set(orders.values_list("state", flat=True)) <= {OrderState.DONE, OrderState.FAILED}
    assert not orders.exclude(state__in=ORDER_TERMINAL_STATES).exists()

    instances = list(Instance.objects.select_related("flavor__family__accelerator_model"))
    states = {i.state for i in instances}
    assert states <= {InstanceState.RUNNING, InstanceState.ERROR, InstanceState.RELEASED}
    running = [i for i in instances if i.state == InstanceState.RUNNING]
    # A host whose stop, resize or release failed may still run on the backend: in error, it
    # keeps its cards until a release is confirmed (one that never ran has no handle, no cards).
    stranded = [i for i in instances if i.state == InstanceState.ERROR and i.backend_handle]

    # Every card is either free or held by exactly one live allocation of a running host or of
    # a stranded one.
    total = world.total_accelerators()
    free = Accelerator.objects.filter(allocation__isnull=True).count()
    allocated = Accelerator.objects.filter(allocation__isnull=False)
    assert free + allocated.count() == total == 24
    assert not allocated.filter(allocation__released_at__isnull=False).exists()
    live = Allocation.objects.filter(released_at__isnull=True)
    assert sorted(live.values_list("workload__instance", flat=True)) == sorted(
        i.pk for i in running + stranded
    )
    for instance in running + stranded:
        allocation = live.get(workload__instance=instance)
        assert allocation.node_id == instance.node_id
        assert set(allocation.accelerators.values_list("node", flat=True)) == {instance.node_id}
    for instance in running:
        allocation = live.get(workload__instance=instance)
        assert (allocation.vcpu, allocation.ram_gb) == (
            instance.flavor.vcpu,
            instance.flavor.ram_gb,
        )
        assert allocation.accelerators.count() == instance.flavor.accelerator_count
    for instance in stranded:  # a failed grow keeps the larger reservation until released
        assert (
            live.get(workload__instance=instance).accelerators.count()
            >= instance.flavor.accelerator_count
        )

    # The quota in use is exactly what the running hosts hold.
    expected = Usage()
    for instance in running:
        expected += demand_for(
            flavor=instance.flavor,
            system_disk_gb=instance.system_disk_gb,
            data_disk_gb=instance.data_disk_gb,
        )
    assert organization_usage(world.organization) == expected

    # A host in error says why, and the order that failed it says the same.
    for instance in instances:
        if instance.state == InstanceState.ERROR:
            assert instance.error_message
            assert instance.orders.filter(
                state=OrderState.FAILED, reason=instance.error_message
            ).exists()
    return {state: sum(i.state == state for i in instances) for state in InstanceState.values}


def test_a_seeded_failure_rate_keeps_the_books_exact(big_world, order_hosts, operate):
    use_backend_config(big_world, {"failure_rate": 0.3, "seed": 7})

    exercise(big_world, order_hosts, operate)

    assert_books_balance(big_world)


@pytest.mark.parametrize(
    ("config", "propagate"),
    [
        ({"failure_rate": 0.3, "seed": 7}, True),
        ({"failure_rate": 0.15, "transient_failure_rate": 0.25, "seed": 3}, False),
    ],
    ids=["permanent", "permanent-and-transient"],
)
def test_failures_at_a_rate_keep_the_books_exact(
    big_world, order_hosts, operate, one_random_stream, monkeypatch, config, propagate
):
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_eager_propagates", propagate)
    use_backend_config(big_world, config)
    one_random_stream(config["seed"])

    exercise(big_world, order_hosts, operate)

    counts = assert_books_balance(big_world)
    assert counts[InstanceState.ERROR] + counts[InstanceState.RELEASED] > 0
    assert counts[InstanceState.RUNNING] > 0
    assert Order.objects.filter(state=OrderState.FAILED).exists()
    assert Order.objects.filter(state=OrderState.DONE).count() > HOSTS // 2


def test_a_seeded_failure_rate_fails_about_that_share_of_calls(big_world, order_hosts):
    use_backend_config(big_world, {"failure_rate": 0.3, "seed": 7})

    orders = [order_hosts(1, name=f"host-{n}")[0] for n in range(HOSTS)]

    failed = sum(o.state == OrderState.FAILED for o in orders)
    assert 0 < failed < HOSTS


def test_a_hundred_orders_against_a_flaky_backend_leave_the_books_as_they_were(
    big_world, order_hosts, operate, one_random_stream, monkeypatch
):
    """30 % of the backend's calls fail (half for good, half transiently): every order ends,
    and once every host is released, free cards, quota and wallet holds are what they were."""
    from apps.billing.models import Wallet
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_eager_propagates", False)
    big_world.set_limit(QuotaResource.INSTANCES, 100)
    config = {"failure_rate": 0.15, "transient_failure_rate": 0.15, "seed": 11}
    use_backend_config(big_world, config)
    one_random_stream(config["seed"])
    free_before = big_world.free_accelerators()

    for n in range(100):
        with contextlib.suppress(NoCapacity, QuotaExceeded):  # full now: room comes back below
            order_hosts(1, name=f"flaky-{n}")
        if n % 3 == 2:  # release as we go, so room comes back
            for host in Instance.objects.filter(state=InstanceState.RUNNING)[:2]:
                operate(host, "release")
    # Release everything left; a release that fails leaves the host in error, holding its
    # cards until a later release is confirmed.
    for _ in range(20):
        left = Instance.objects.exclude(state=InstanceState.RELEASED)
        if not left.exists():
            break
        for host in left:
            operate(host, "release")

    assert Order.objects.count() >= 100
    assert not Order.objects.exclude(state__in=ORDER_TERMINAL_STATES).exists()
    assert Order.objects.filter(state=OrderState.FAILED).exists()  # the faults did happen
    assert not Instance.objects.exclude(state=InstanceState.RELEASED).exists()
    assert big_world.free_accelerators() == free_before == big_world.total_accelerators()
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
    assert organization_usage(big_world.organization) == Usage()
    wallet = Wallet.objects.get(organization=big_world.organization)
    assert wallet.held_minor == 0


# --- a job that loses a race for rows -----------------------------------------------------------


def lost_race():
    """What Django raises when PostgreSQL breaks a deadlock by failing this transaction."""
    try:
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.errors.DeadlockDetected as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


def test_a_release_whose_job_loses_a_race_runs_again_and_releases(
    world, running_host, operate, monkeypatch, retrying_tasks
):
    """Under load, 87 release jobs died with "deadlock detected" and left their hosts releasing
    until the sweep, minutes later: a job that loses a race is run again, with backoff."""
    instance = running_host(2)
    order = operate(instance, "release", run_tasks=False)
    complete, attempts = operations.complete_operation, []

    def deadlocked_once(**kwargs):
        attempts.append(kwargs)
        if len(attempts) == 1:
            raise lost_race()
        return complete(**kwargs)

    monkeypatch.setattr(operations, "complete_operation", deadlocked_once)
    fulfil_order.apply(args=(order.pk,))

    assert len(attempts) == 2
    assert Instance.objects.get(pk=instance.pk).state == InstanceState.RELEASED
    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert_gave_everything_back(world, instance)


def test_a_job_that_keeps_losing_gives_up_after_its_retries(
    world, running_host, operate, monkeypatch, retrying_tasks
):
    instance = running_host(2)
    order = operate(instance, "stop", run_tasks=False)
    attempts = []

    def always_deadlocked(**kwargs):
        attempts.append(kwargs)
        raise lost_race()

    monkeypatch.setattr(operations, "complete_operation", always_deadlocked)
    result = fulfil_order.apply(args=(order.pk,))

    assert isinstance(result.result, OperationalError)
    assert len(attempts) == JOB_CONTENTION_RETRIES + 1
    assert Order.objects.get(pk=order.pk).state == OrderState.FULFILLING  # the sweep's, then


def test_other_database_errors_are_not_retried(
    world, running_host, operate, monkeypatch, retrying_tasks
):
    instance = running_host(2)
    order = operate(instance, "stop", run_tasks=False)
    attempts = []

    def broken(**kwargs):
        attempts.append(kwargs)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(operations, "complete_operation", broken)
    result = fulfil_order.apply(args=(order.pk,))

    assert isinstance(result.result, OperationalError)
    assert len(attempts) == 1


def test_retries_back_off_with_jitter():
    first = [job_retry_countdown(0) for _ in range(50)]
    assert all(0.25 <= c <= 0.5 for c in first) and len(set(first)) > 1
    assert all(15 <= job_retry_countdown(10) <= 30 for _ in range(50))
