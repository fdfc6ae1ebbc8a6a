"""Scheduled stops and the auto-release of hosts left stopped (apps/orders/expiry.py), on the
orders world's simulator (zero latency: a stop or release completes when its job runs)."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.core.exceptions import ValidationError

from apps.core.errors import InvalidTransition, PermissionDenied
from apps.core.models import AuditEvent
from apps.orders import expiry
from apps.orders.models import IdlePolicy, OrderKind
from apps.orders.selectors import release_date_of
from apps.orders.tasks import release_stopped_hosts, stop_scheduled_hosts

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

HOUR, DAY = timedelta(hours=1), timedelta(days=1)


@pytest.fixture
def clock():
    """The time stands still from now until the test moves it (prices are in force from now)."""
    with time_machine.travel(datetime.now(UTC), tick=False) as traveller:
        yield traveller


def now() -> datetime:
    return datetime.now(UTC)


def events(instance, action) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, object_id=str(instance.pk)).order_by("pk"))


@pytest.fixture
def run_jobs(django_capture_on_commit_callbacks):
    """`with run_jobs():` runs what was queued after commit (the operations, the mails)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


# --- setting and clearing a schedule ---------------------------------------------------------


def test_a_stop_is_scheduled_at_a_time_or_after_hours_and_cleared(clock, running_host, owner):
    host = running_host()
    at = now() + 5 * HOUR
    assert expiry.schedule_stop(instance=host, actor=owner, at=at).stop_at == at
    host.refresh_from_db()
    assert host.stop_at == at
    expiry.schedule_stop(instance=host, actor=owner, after_hours=2)
    host.refresh_from_db()
    assert host.stop_at == now() + 2 * HOUR
    assert [e.data["stop_at"] for e in events(host, "instance.stop_scheduled")] == [
        at.isoformat(),
        (now() + 2 * HOUR).isoformat(),
    ]
    expiry.schedule_stop(instance=host, actor=owner)
    host.refresh_from_db()
    assert host.stop_at is None
    assert len(events(host, "instance.stop_unscheduled")) == 1
    expiry.schedule_stop(instance=host, actor=owner)  # nothing to clear: nothing recorded
    assert len(events(host, "instance.stop_unscheduled")) == 1


@pytest.mark.parametrize(
    ("given", "field", "message"),
    [
        ({"at": "past"}, "at", "Choose a time in the future."),
        ({"at": "now"}, "at", "Choose a time in the future."),
        ({"at": "31 days"}, "at", "at most 30 days ahead"),
        ({"at": "naive"}, "at", "with its time zone"),
        ({"after_hours": 0}, "after_hours", "1–720 hours"),
        ({"after_hours": 721}, "after_hours", "1–720 hours"),
        ({"after_hours": 2, "at": "now"}, "__all__", "not both"),
    ],
)
def test_bad_times_are_refused_with_the_field(clock, running_host, owner, given, field, message):
    host = running_host()
    times = {
        "past": now() - HOUR,
        "now": now(),
        "31 days": now() + 31 * DAY,
        "naive": datetime.now() + HOUR,  # noqa: DTZ005  (the refusal is the point)
    }
    if "at" in given:
        given = {**given, "at": times[given["at"]]}
    with pytest.raises(ValidationError) as refused:
        expiry.schedule_stop(instance=host, actor=owner, **given)
    assert message in " ".join(refused.value.message_dict[field])
    host.refresh_from_db()
    assert host.stop_at is None


def test_thirty_days_ahead_is_the_furthest(clock, running_host, owner):
    host = running_host()
    expiry.schedule_stop(instance=host, actor=owner, at=now() + 30 * DAY)
    expiry.schedule_stop(instance=host, actor=owner, after_hours=720)


def test_only_a_running_host_takes_a_schedule(clock, running_host, owner, operate):
    host = running_host()
    operate(host, OrderKind.STOP)
    with pytest.raises(InvalidTransition, match="only a running host"):
        expiry.schedule_stop(instance=host, actor=owner, after_hours=2)


def test_a_viewer_may_not_schedule(clock, running_host, viewer):
    with pytest.raises(PermissionDenied):
        expiry.schedule_stop(instance=running_host(), actor=viewer, after_hours=2)


def test_any_stop_clears_the_schedule(clock, running_host, owner, operate):
    host = running_host()
    expiry.schedule_stop(instance=host, actor=owner, after_hours=3)
    operate(host, OrderKind.STOP)
    host.refresh_from_db()
    assert (host.state, host.stop_at) == ("stopped", None)


# --- the beat job stopping due hosts ------------------------------------------------------------


def test_the_job_stops_a_due_host_through_the_normal_stop(clock, running_host, owner, run_jobs):
    due, later = running_host(name="due"), running_host(name="later")
    expiry.schedule_stop(instance=due, actor=owner, after_hours=1)
    expiry.schedule_stop(instance=later, actor=owner, after_hours=2)
    clock.shift(HOUR - timedelta(seconds=1))
    assert stop_scheduled_hosts() == 0  # a second early
    clock.shift(timedelta(seconds=30))  # the next run, every 30 s
    with run_jobs():
        assert stop_scheduled_hosts() == 1
    due.refresh_from_db()
    later.refresh_from_db()
    assert (due.state, due.stop_at) == ("stopped", None)
    assert later.state == "running" and later.stop_at == now() + HOUR - timedelta(seconds=29)
    (order,) = due.orders.filter(kind=OrderKind.STOP)
    assert order.state == "done" and "scheduled" in order.reason
    (event,) = events(due, "instance.scheduled_stop")
    assert event.actor_label == "system:scheduled-stop" and event.data["order"] == order.pk
    assert AuditEvent.objects.filter(
        action="order.submitted", object_id=str(order.pk), actor_label="system:scheduled-stop"
    ).exists()


def test_the_job_stops_regardless_of_the_idle_policy(clock, running_host, owner, world):
    IdlePolicy.objects.create(park=world.park, threshold_minutes=600, auto_stop=False)
    host = running_host()
    expiry.schedule_stop(instance=host, actor=owner, after_hours=1)
    clock.shift(HOUR)
    assert len(expiry.stop_due_hosts()) == 1


def test_the_job_leaves_a_host_already_stopping(clock, running_host, owner, operate):
    host = running_host()
    expiry.schedule_stop(instance=host, actor=owner, after_hours=1)
    operate(host, OrderKind.STOP, run_tasks=False)  # the tenant's own stop, still under way
    clock.shift(2 * HOUR)
    assert expiry.stop_due_hosts() == []
    assert host.orders.filter(kind=OrderKind.STOP).count() == 1
    assert events(host, "instance.scheduled_stop") == []


# --- auto-release --------------------------------------------------------------------------------


@pytest.fixture
def stopped_host(clock, running_host, operate):
    """A host stopped now (the world's park has no policy row: the default 15 days apply)."""
    host = running_host()
    operate(host, OrderKind.STOP)
    host.refresh_from_db()
    assert host.state == "stopped" and host.stopped_at == now()
    return host


def notices(host) -> list[int]:
    return [e.data["days_before"] for e in events(host, "instance.release_notice")]


def test_owners_are_told_3_days_and_1_day_before_each_once(clock, stopped_host, owner, run_jobs):
    stopped_at = stopped_host.stopped_at
    clock.shift(12 * DAY - HOUR)
    assert release_stopped_hosts() == {"released": 0, "notified": 0}
    clock.shift(HOUR)  # 3 days to go
    with run_jobs():
        assert release_stopped_hosts() == {"released": 0, "notified": 1}
    clock.shift(HOUR)
    assert release_stopped_hosts() == {"released": 0, "notified": 0}  # once
    clock.shift(2 * DAY - HOUR)  # 1 day to go
    with run_jobs():
        assert release_stopped_hosts()["notified"] == 1
        assert release_stopped_hosts()["notified"] == 0
    assert notices(stopped_host) == [3, 1]
    release = (stopped_at + 15 * DAY).isoformat()
    assert {e.data["release_at"] for e in events(stopped_host, "instance.release_notice")} == {
        release
    }
    assert len(mail.outbox) == 2 and mail.outbox[0].to == [owner.email]
    # Mailed in the portal's language (zh-hans), whatever the request's.
    assert "即将被释放" in mail.outbox[0].subject
    assert "之前未开机" in mail.outbox[0].body and "数据盘" in mail.outbox[0].body


def test_a_missed_notice_is_not_sent_late(clock, stopped_host):
    clock.shift(14 * DAY + HOUR)  # the job was down at 3 days to go
    release_stopped_hosts()
    release_stopped_hosts()
    assert notices(stopped_host) == [1]


def test_a_host_stopped_past_the_days_is_released(clock, stopped_host, owner, run_jobs):
    clock.shift(14 * DAY)
    assert release_stopped_hosts() == {"released": 0, "notified": 1}  # a day to go
    clock.shift(DAY - timedelta(seconds=1))
    assert release_stopped_hosts()["released"] == 0
    clock.shift(timedelta(seconds=1))
    with run_jobs():
        assert release_stopped_hosts()["released"] == 1
    stopped_host.refresh_from_db()
    assert stopped_host.state == "released"
    (order,) = stopped_host.orders.filter(kind=OrderKind.RELEASE)
    assert order.state == "done" and "15 days" in order.reason
    (event,) = events(stopped_host, "instance.auto_released")
    assert event.actor_label == "system:auto-release" and event.data["days"] == 15
    assert "已被释放" in mail.outbox[-1].subject
    assert release_stopped_hosts() == {"released": 0, "notified": 0}


def test_the_parks_days_apply_and_zero_never_releases(clock, stopped_host, world):
    policy = IdlePolicy.objects.create(park=world.park, release_stopped_after_days=2)
    clock.shift(2 * DAY)
    IdlePolicy.objects.filter(pk=policy.pk).update(release_stopped_after_days=0)
    clock.shift(300 * DAY)
    assert release_stopped_hosts() == {"released": 0, "notified": 0}
    IdlePolicy.objects.filter(pk=policy.pk).update(release_stopped_after_days=2)
    assert release_stopped_hosts() == {"released": 0, "notified": 0}  # its day's notice first
    clock.shift(DAY)
    assert release_stopped_hosts()["released"] == 1


def test_a_host_is_never_released_without_a_days_notice(clock, stopped_host, world, run_jobs):
    """The park shortens its days to fewer than the host has been stopped: the host is not
    released on the next run but told it will be in a day, and released then."""
    clock.shift(10 * DAY)
    assert release_stopped_hosts() == {"released": 0, "notified": 0}
    IdlePolicy.objects.create(park=world.park, release_stopped_after_days=5)
    assert release_date_of(stopped_host) == now() + DAY  # not its policy's date, past already
    with run_jobs():
        assert release_stopped_hosts() == {"released": 0, "notified": 0}
    stopped_host.refresh_from_db()
    assert stopped_host.state == "stopped"
    (notice,) = events(stopped_host, "instance.release_notice")
    assert notice.data == {"days_before": 1, "release_at": (now() + DAY).isoformat()}
    assert "即将被释放" in mail.outbox[-1].subject
    clock.shift(HOUR)
    assert release_date_of(stopped_host) == now() + DAY - HOUR  # a day after its notice
    clock.shift(DAY - 2 * HOUR)
    assert release_stopped_hosts()["released"] == 0
    clock.shift(HOUR)
    assert release_stopped_hosts()["released"] == 1


def test_a_started_host_starts_over(clock, stopped_host, operate):
    clock.shift(14 * DAY)
    release_stopped_hosts()
    assert notices(stopped_host) == [1]
    operate(stopped_host, OrderKind.START)
    stopped_host.refresh_from_db()
    assert (stopped_host.state, stopped_host.stopped_at) == ("running", None)
    clock.shift(DAY)
    operate(stopped_host, OrderKind.STOP)
    stopped_host.refresh_from_db()
    assert stopped_host.stopped_at == now()
    clock.shift(5 * DAY)  # 20 days since the first stop, 5 since the last
    assert release_stopped_hosts() == {"released": 0, "notified": 0}
    clock.shift(7 * DAY)  # 3 days to go since the last stop: notified again
    assert release_stopped_hosts() == {"released": 0, "notified": 1}
    assert notices(stopped_host) == [1, 3]


def test_a_resize_while_stopped_keeps_counting(clock, stopped_host, operate, world):
    clock.shift(DAY)
    operate(stopped_host, OrderKind.RESIZE, flavor=world.flavors[2])
    stopped_host.refresh_from_db()
    assert stopped_host.state == "stopped" and stopped_host.stopped_at == now() - DAY
