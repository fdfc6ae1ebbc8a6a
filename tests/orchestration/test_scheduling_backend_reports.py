"""What a backend reports of a task it has (`scheduling.task_progress`): kept on the task, the
last node and devices remembered after the backend forgets them, and a task the backend keeps
waiting past LOAM_TASK_PENDING_REPORT_S reported once in the audit log."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from apps.core.models import AuditEvent
from apps.orchestration.backends.base import TASK_PENDING, TASK_RUNNING, TASK_SUCCEEDED
from apps.orchestration.models import TaskState
from apps.orchestration.scheduling import task_progress
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db


def report(state, **fields):
    return {"state": state, "message": "", "node": "", "devices": [], "exit_code": None, **fields}


def test_the_last_node_and_devices_are_kept_once_the_backend_forgets_them():
    task = TaskFactory(state=TaskState.RUNNING)
    task_progress(
        task_id=task.pk,
        logs="step 1",
        backend_status=report(TASK_RUNNING, node="n2", devices=[0, 1]),
    )
    task_progress(task_id=task.pk, logs="done", backend_status=report(TASK_SUCCEEDED, exit_code=0))

    task.refresh_from_db()
    assert task.logs == "done"
    assert task.backend_status["node"] == "n2"
    assert task.backend_status["devices"] == [0, 1]
    assert task.backend_status["exit_code"] == 0


def test_a_long_wait_at_the_backend_is_reported_once(settings):
    settings.LOAM_TASK_PENDING_REPORT_S = 600
    task = TaskFactory(state=TaskState.PLACED)
    waiting = report(TASK_PENDING, message="Slurm: pending (Resources)")
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        task_progress(task_id=task.pk, logs="", backend_status=waiting)
    with time_machine.travel(start + timedelta(minutes=9), tick=False):
        task_progress(task_id=task.pk, logs="", backend_status=waiting)
    assert not AuditEvent.objects.filter(action="task.pending_at_backend").exists()

    for minutes in (11, 30):
        with time_machine.travel(start + timedelta(minutes=minutes), tick=False):
            task_progress(task_id=task.pk, logs="", backend_status=waiting)

    event = AuditEvent.objects.get(action="task.pending_at_backend")
    assert event.data == {"minutes": 11, "why": "Slurm: pending (Resources)"}
    assert event.organization_id == task.organization_id


def test_the_sweep_hands_over_a_placed_task_whose_job_was_lost(
    task_world, django_capture_on_commit_callbacks, settings
):
    from apps.orchestration.models import Placement
    from apps.orchestration.tasks import reconcile_tasks

    settings.LOAM_RECONCILE_AFTER_S = 300
    with django_capture_on_commit_callbacks(execute=False):  # run_task is never sent
        task = task_world.submit()
        task_world.schedule()
    task.refresh_from_db()
    assert (task.state, task.backend_handle) == (TaskState.PLACED, "")
    assert reconcile_tasks() == 0  # placed just now: its job may be on its way

    Placement.objects.filter(workload__task=task).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    assert reconcile_tasks() == 1

    task.refresh_from_db()
    assert task.backend_handle.startswith("simtask-")
    assert task.state == TaskState.RUNNING
    assert reconcile_tasks() == 0


def test_a_backend_that_cannot_be_asked_leaves_the_task_unknown_and_unbilled_past_its_answer(
    task_world, client, django_capture_on_commit_callbacks
):
    """While its backend cannot be asked, a running task says since when its state is unknown,
    and its meter waits at the last time the backend said it ran; the next answer ends both."""
    from apps.billing.models import Meter
    from apps.orchestration import tasks as jobs
    from apps.orchestration.backends.base import BackendError
    from apps.orchestration.backends.simulator import SimulatorDriver

    start = timezone.now().replace(microsecond=0)
    with time_machine.travel(start, tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            task = task_world.submit()
            task_world.schedule()
        jobs.follow_task(task.pk)
    task.refresh_from_db()
    assert task.state == TaskState.RUNNING
    [meter] = Meter.objects.filter(workload__task=task)

    with time_machine.travel(start + timedelta(minutes=5), tick=False):
        jobs.follow_task(task.pk)  # it runs: the meter may go this far
    meter.refresh_from_db()
    assert meter.known_until == start + timedelta(minutes=5)

    lost = start + timedelta(minutes=7)
    with time_machine.travel(lost, tick=False):
        SimulatorDriver.fail_next(BackendError("simulator: unreachable", transient=True))
        try:
            jobs.follow_task(task.pk)
        finally:
            SimulatorDriver.clear_injected()
    with time_machine.travel(lost + timedelta(minutes=3), tick=False):
        SimulatorDriver.fail_next(BackendError("simulator: unreachable", transient=True))
        try:
            jobs.follow_task(task.pk)
        finally:
            SimulatorDriver.clear_injected()
        task.refresh_from_db()
        assert task.state == TaskState.RUNNING  # not failed: it may well run on
        assert task.backend_status["unreachable_since"] == lost.isoformat()  # the first miss
        client.force_login(task_world.owner)
        page = client.get(f"/tasks/{task.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
        since = timezone.localtime(lost).strftime("%H:%M")
        assert f"State unknown since {since} — backend unreachable" in page
        meter.refresh_from_db()
        assert meter.known_until == start + timedelta(minutes=5)

    with time_machine.travel(lost + timedelta(minutes=4), tick=False):
        jobs.follow_task(task.pk)  # it answers again
    task.refresh_from_db()
    meter.refresh_from_db()
    assert "unreachable_since" not in task.backend_status
    assert meter.known_until == lost + timedelta(minutes=4)
