"""Following a backend's host requests without waiting on them: the job that makes a request
looks once and schedules the next look; a look reports the request done, looks again while it
is under way (or the backend cannot answer), and fails it for good past the deadline with the
same books as any permanent failure. A look lost on the way is made good by the sweep.

The jobs' messages go to a recording broker (`sent`); `advance(seconds)` lets the test's clock
run on and runs each message when its countdown has passed, as a worker would."""

import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.core.models import AuditEvent
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Accelerator, Allocation
from apps.orders import tasks as jobs
from apps.orders.models import Instance, InstanceState, Order, OrderState
from apps.quotas.services import Usage, organization_usage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

JOBS = (jobs.provision_instance, jobs.fulfil_order, jobs.follow_provisioning, jobs.follow_operation)


@dataclass
class Message:
    job: object
    args: tuple
    due: float  # epoch seconds


@pytest.fixture
def clock():
    """The time stands still from now until the test moves it (prices are in force from now)."""
    with time_machine.travel(datetime.now(UTC), tick=False) as traveller:
        yield traveller


@pytest.fixture
def sent(monkeypatch):
    """The messages the jobs send, kept here instead of running at once (eager mode)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", False)
    messages: list[Message] = []

    for job in JOBS:

        def record(args=(), kwargs=None, *, countdown=0, _job=job, **options):
            messages.append(Message(_job, tuple(args), time.time() + countdown))

        monkeypatch.setattr(job, "apply_async", record)
    return messages


@pytest.fixture
def advance(clock, sent):
    """advance(seconds): let that much time pass, running each message when it is due (in
    order, as a worker would, each at its due time); return how many ran."""

    def run(seconds: float) -> int:
        until = time.time() + seconds
        count = 0
        while due := [m for m in sent if m.due <= until]:
            message = min(due, key=lambda m: m.due)
            sent.remove(message)
            clock.move_to(datetime.fromtimestamp(max(message.due, time.time()), UTC))
            message.job(*message.args)
            count += 1
        clock.move_to(datetime.fromtimestamp(until, UTC))
        return count

    return run


def use_latency(world, seconds: float, **config):
    world.backend.config = {"latency_seconds": [seconds, seconds], **config}
    world.backend.save(update_fields=["config"])


def provisioning(world, order_hosts, accelerators=2) -> Instance:
    """A create order whose provisioning job has run once (it made the request and looked)."""
    [order] = order_hosts(accelerators, run_tasks=False)
    jobs.provision_instance(order.instance_id)
    return Instance.objects.get(pk=order.instance_id)


def state_of(instance) -> str:
    return Instance.objects.get(pk=instance.pk).state


def assert_gave_everything_back(world, instance):
    assert not Allocation.objects.filter(
        workload__instance=instance, released_at__isnull=True
    ).exists()
    assert world.free_accelerators() == world.total_accelerators()
    assert organization_usage(world.organization) == Usage()


# --- provisioning ----------------------------------------------------------------------------


def test_the_request_does_not_hold_the_job_for_the_backends_latency(world, order_hosts, sent):
    use_latency(world, 30)
    began = time.monotonic()

    instance = provisioning(world, order_hosts)

    assert time.monotonic() - began < 10  # it used to sleep the 30 s through
    assert state_of(instance) == InstanceState.PROVISIONING
    [look] = sent
    assert look.job is jobs.follow_provisioning


def test_a_host_runs_once_a_look_finds_the_request_done(world, order_hosts, clock, sent, advance):
    use_latency(world, 3)
    instance = provisioning(world, order_hosts)

    assert advance(2.9) >= 2  # it looked again, more than once, while the backend worked
    assert state_of(instance) == InstanceState.PROVISIONING
    assert len(sent) == 1  # and the next look is on its way

    advance(1.5)

    host = Instance.objects.get(pk=instance.pk)
    assert host.state == InstanceState.RUNNING
    assert host.backend_handle.startswith("sim-")
    assert host.access["address"].startswith("198.18.")
    assert Order.objects.get(instance=instance).state == OrderState.DONE
    assert sent == []  # nothing left to look at


def test_looks_come_quickly_at_first_and_further_apart_later(world, order_hosts, clock, sent):
    use_latency(world, 200)
    provisioning(world, order_hosts)
    countdowns = []
    for _ in range(12):
        [look] = sent
        countdowns.append(look.due - time.time())
        clock.move_to(datetime.fromtimestamp(look.due, UTC))
        sent.clear()
        look.job(*look.args)

    assert countdowns[0] == jobs.POLL_MIN_S
    assert countdowns == sorted(countdowns)
    assert countdowns[-1] > 5 * jobs.POLL_MIN_S
    assert max(countdowns) <= jobs.POLL_MAX_S


def test_a_backend_that_cannot_answer_now_is_asked_again(world, order_hosts, clock, sent, advance):
    use_latency(world, 1)
    instance = provisioning(world, order_hosts)
    SimulatorDriver.fail_next(*[BackendError("busy", transient=True)] * 3)

    advance(3)  # three looks get no answer, the next finds it done

    assert state_of(instance) == InstanceState.RUNNING
    assert Instance.objects.get(pk=instance.pk).error_message == ""


def test_a_request_the_backend_fails_ends_the_host_in_error(
    world, order_hosts, clock, sent, advance
):
    use_latency(world, 2, failure_rate=1)
    instance = provisioning(world, order_hosts)
    assert state_of(instance) == InstanceState.PROVISIONING  # accepted, under way

    advance(3)

    host = Instance.objects.get(pk=instance.pk)
    assert host.state == InstanceState.ERROR
    assert host.error_message == "simulator: provision failed (simulated hardware fault)"
    assert Order.objects.get(instance=instance).reason == host.error_message
    assert_gave_everything_back(world, instance)
    assert sent == []


def test_a_request_past_the_deadline_fails_with_a_clear_error_and_frees_the_cards(
    world, order_hosts, clock, sent, advance, settings
):
    settings.LOAM_HOST_REQUEST_TIMEOUT_S = 60
    use_latency(world, 3600)
    instance = provisioning(world, order_hosts)
    assert world.free_accelerators() == world.total_accelerators() - 2

    advance(59)
    assert state_of(instance) == InstanceState.PROVISIONING
    advance(11)

    host = Instance.objects.get(pk=instance.pk)
    assert host.state == InstanceState.ERROR
    message = "The backend did not finish creating the host within 60 seconds."
    assert host.error_message == message
    order = Order.objects.get(instance=instance)
    assert (order.state, order.reason) == (OrderState.FAILED, message)
    assert_gave_everything_back(world, instance)
    assert sent == []


def test_a_request_that_keeps_moving_waits_past_the_deadline_from_its_last_progress(
    world, order_hosts, clock, sent, advance, settings, monkeypatch
):
    # An agent host whose saved image is copied to its server: slow, but bytes keep moving.
    settings.LOAM_HOST_REQUEST_TIMEOUT_S = 60
    use_latency(world, 3600)
    moving_until = time.time() + 100
    answer = SimulatorDriver.host_request_status

    def moving(driver, request):
        status = answer(driver, request)
        if not status.done and time.time() <= moving_until:
            return replace(status, progress_at=time.time())
        return status

    monkeypatch.setattr(SimulatorDriver, "host_request_status", moving)
    instance = provisioning(world, order_hosts)

    advance(150)  # 100 s moving, then 50 s still
    assert state_of(instance) == InstanceState.PROVISIONING
    advance(20)  # 60 s past its last progress
    host = Instance.objects.get(pk=instance.pk)
    assert host.state == InstanceState.ERROR
    assert host.error_message == "The backend did not finish creating the host within 60 seconds."


def test_two_chains_of_looks_report_the_host_once(world, order_hosts, clock, sent, advance):
    use_latency(world, 1)
    instance = provisioning(world, order_hosts)
    jobs.provision_instance(instance.pk)  # a duplicate delivery: a second request and chain
    assert len(sent) == 2

    advance(2)

    assert state_of(instance) == InstanceState.RUNNING
    running = AuditEvent.objects.filter(action="instance.running", object_id=str(instance.pk))
    assert running.count() == 1
    assert Order.objects.get(instance=instance).state == OrderState.DONE


def test_a_lost_look_is_made_good_by_the_sweep(world, order_hosts, clock, sent, advance, settings):
    settings.LOAM_RECONCILE_AFTER_S = 300
    use_latency(world, 2)
    instance = provisioning(world, order_hosts)
    sent.clear()  # the broker lost the next look

    clock.shift(timedelta(seconds=301))
    assert jobs.reconcile_hosts() == 1
    assert jobs.reconcile_hosts() == 0  # sent again just now: left to its new chain
    advance(0)  # the request again, and its first look
    assert state_of(instance) == InstanceState.PROVISIONING
    advance(3)

    assert state_of(instance) == InstanceState.RUNNING
    assert Order.objects.get(instance=instance).state == OrderState.DONE


# --- operations ------------------------------------------------------------------------------


@pytest.fixture
def running(world, running_host):
    """A running 2-card host, provisioned at once; the backend then takes 2 s a request."""
    instance = running_host(2)
    use_latency(world, 2)
    return instance


def request(operate, instance, kind, **params) -> Order:
    """Request the operation and run its job once (the request and a first look)."""
    order = operate(instance, kind, run_tasks=False, **params)
    jobs.fulfil_order(order.pk)
    return Order.objects.get(pk=order.pk)


def test_an_operation_completes_when_a_look_finds_it_done(
    world, running, operate, clock, sent, advance
):
    order = request(operate, running, "stop")
    assert order.state == OrderState.FULFILLING
    assert state_of(running) == InstanceState.STOPPING
    [look] = sent
    assert look.job is jobs.follow_operation

    advance(2.5)

    assert state_of(running) == InstanceState.STOPPED
    assert Order.objects.get(pk=order.pk).state == OrderState.DONE
    assert sent == []


def test_a_release_past_the_deadline_leaves_the_host_in_error_holding_its_cards(
    world, running, operate, clock, sent, advance, settings
):
    settings.LOAM_HOST_REQUEST_TIMEOUT_S = 30
    use_latency(world, 3600)

    order = request(operate, running, "release")
    advance(29)
    assert Order.objects.get(pk=order.pk).state == OrderState.FULFILLING
    advance(jobs.POLL_MAX_S + 1)  # the first look past the deadline

    message = "The backend did not finish “Release” within 30 seconds."
    order = Order.objects.get(pk=order.pk)
    assert (order.state, order.reason) == (OrderState.FAILED, message)
    host = Instance.objects.get(pk=running.pk)
    assert (host.state, host.error_message) == (InstanceState.ERROR, message)
    # The backend may still run it: its cards stay taken until a release is confirmed.
    assert Accelerator.objects.filter(allocation__workload__instance=running).count() == 2
    assert organization_usage(world.organization) == Usage()


def test_a_disk_expansion_past_the_deadline_fails_alone(
    world, running, operate, clock, sent, advance, settings
):
    settings.LOAM_HOST_REQUEST_TIMEOUT_S = 30
    use_latency(world, 3600)

    order = request(operate, running, "expand_disk", data_disk_gb=200)
    advance(30 + jobs.POLL_MAX_S)

    assert Order.objects.get(pk=order.pk).state == OrderState.FAILED
    host = Instance.objects.get(pk=running.pk)
    assert (host.state, host.data_disk_gb, host.error_message) == (InstanceState.RUNNING, 0, "")
