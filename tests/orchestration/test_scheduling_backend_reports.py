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
    assert event.organization == task.organization


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
