"""Jobs that hand training tasks to their backend driver and follow them there, the queue
passes that place them (apps.orchestration.scheduling), and the backends' periodic probes and
capacity samples (beat: every minute, every 5 minutes).

Each job reloads its rows by primary key and re-checks their state (it may run late, or twice).
Transient backend errors are retried with exponential backoff; a permanent one fails the task
with the backend's message.
"""

import math
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from apps.core.transactions import on_commit_task
from apps.orchestration import capacity, preemption, rooms, scheduling, selectors, services
from apps.orchestration.backends.base import (
    TASK_PENDING,
    TASK_RUNNING,
    TASK_SUCCEEDED,
    BackendError,
    BatchDriver,
    TaskSpec,
)
from apps.orchestration.backends.registry import driver_of
from apps.orchestration.models import Backend, Task, TaskState
from apps.quotas.selectors import accelerator_limit
from apps.tenants.models import Park

MAX_RETRIES = 5
RETRY_BASE_SECONDS = 2


def retry_if_transient(job, exc: BackendError):
    """Have Celery run `job` again later if the backend's error is transient (and retries are
    left); otherwise return, and the caller reports the failure."""
    if exc.transient and job.request.retries < MAX_RETRIES:
        raise job.retry(exc=exc, countdown=RETRY_BASE_SECONDS * 2**job.request.retries)


def task_driver(task: Task) -> BatchDriver:
    return driver_of(task.pool.backend)


def task_spec(task: Task) -> TaskSpec:
    nodes = scheduling.task_node_names(task)
    return TaskSpec(
        name=task.name,
        node=task.node.hostname,
        nodes=nodes if len(nodes) > 1 else (),
        accelerator_indices=scheduling.task_device_indices(task),
        accelerator_milli=task.accelerator_milli,
        vcpu=task.vcpu,
        ram_gb=task.ram_gb,
        image=task.image.code,
        command=task.command,
        time_limit_min=_minutes_until(task.deadline),
        organization_id=task.organization_id,
        accelerator_limit=accelerator_limit(task.organization_id),
        preemptible=task.preemptible,
        fair_share=selectors.fair_share_of(task.organization_id),
    )


def _minutes_until(deadline) -> int | None:
    if deadline is None:
        return None
    return max(1, math.ceil((deadline - timezone.now()).total_seconds() / 60))


def _load_task(task_id: int) -> Task:
    return Task.objects.select_related("pool__backend", "node", "image", "organization").get(
        pk=task_id
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def run_task(self, task_id: int) -> None:
    """Hand a placed task to its backend, then look at it once: a task already running (or, as
    the simulator's quick ones, already done) moves on here, the others on a later pass."""
    task = _load_task(task_id)
    if task.state != TaskState.PLACED or task.backend_handle:
        return
    try:
        handle = task_driver(task).submit_task(task_spec(task))
    except BackendError as exc:
        retry_if_transient(self, exc)
        scheduling.finish_task(task_id=task_id, succeeded=False, message=str(exc))
        return
    if scheduling.task_submitted(task_id=task_id, handle=handle) is not None:
        follow_task(task_id)


@shared_task(acks_late=True)
def run_placed_tasks(task_ids: list[int]) -> None:
    """Send `run_task` for each task a queue pass placed: the pass hands them all over in this
    one message, and each still runs as its own job (in parallel on the workers, with its own
    retries). One that cannot be sent is left placed without a handle, where
    `reconcile_tasks` finds it and sends it again."""
    for task_id in task_ids:
        run_task.delay(task_id)


def follow_task(task_id: int) -> None:
    """Ask the backend how a submitted task does: keep its logs, mark it running once it runs,
    end it when it is done. A transient error waits for the next pass; a permanent one fails
    the task."""
    task = _load_task(task_id)
    if task.state not in (TaskState.PLACED, TaskState.RUNNING) or not task.backend_handle:
        return
    asked_at = timezone.now()
    try:
        driver = task_driver(task)
        status = driver.task_status(task.backend_handle)
        logs = driver.task_logs(task.backend_handle)
    except BackendError as exc:
        if exc.transient:
            scheduling.task_unreachable(task_id=task_id, error=str(exc), now=asked_at)
        else:
            scheduling.finish_task(task_id=task_id, succeeded=False, message=str(exc))
        return
    scheduling.task_progress(
        task_id=task_id,
        logs=logs,
        backend_status={
            "state": status.state,
            "message": status.message,
            "node": status.node,
            "devices": list(status.device_indices),
            "exit_code": status.exit_code,
        },
        running_at=asked_at if status.state == TASK_RUNNING else None,
    )
    if status.state == TASK_PENDING:
        return  # the task page shows why it waits (Slurm's reason)
    if task.state == TaskState.PLACED:
        scheduling.task_started(task_id=task_id, at=status.started_at)
    if status.finished:
        scheduling.finish_task(
            task_id=task_id,
            succeeded=status.state == TASK_SUCCEEDED,
            logs=logs,
            message=status.message,
            at=status.finished_at,
        )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def cancel_backend_task(self, task_id: int) -> None:
    """Tell the backend a cancelled task is to stop (the portal already gave its capacity
    back)."""
    task = _load_task(task_id)
    if task.state != TaskState.CANCELLED or not task.backend_handle or task.pool is None:
        return
    try:
        task_driver(task).cancel_task(task.backend_handle)
    except BackendError as exc:
        retry_if_transient(self, exc)


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def stop_preempted_job(self, backend_id: int, handle: str) -> None:
    """Stop the backend job of a task that was preempted (the portal already requeued it and
    gave its capacity back; its next placement is a new job). Slurm's job is cancelled as its
    owner; one that already ended is left as it is."""
    backend = Backend.objects.filter(pk=backend_id).first()
    if backend is None:
        return
    try:
        driver_of(backend).cancel_task(handle)
    except BackendError as exc:
        retry_if_transient(self, exc)


def accelerator_limit_changed(organization_id: int) -> None:
    """`quotas.services.ACCELERATOR_LIMIT_CHANGED`: the backends that enforce it are told
    after commit."""
    on_commit_task(sync_tenant_limits, organization_id)


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def sync_tenant_limits(self, organization_id: int) -> None:
    """The organization's accelerator limit, as it stands now, to each backend that has run its
    tasks and enforces the limit itself (`set_tenant_limit`: a Slurm account's GrpTRES), so a
    lowered quota holds there at once, not from the organization's next task."""
    _tell_tenant_backends(
        self, organization_id, "set_tenant_limit", accelerator_limit(organization_id)
    )


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def sync_tenant_fair_share(self, organization_id: int) -> None:
    """The organization's share, as it stands now, to each backend that has run its tasks and
    keeps fair share itself (`set_tenant_fair_share`: a Slurm account's fairshare)."""
    shares = selectors.fair_share_of(organization_id)
    _tell_tenant_backends(self, organization_id, "set_tenant_fair_share", shares)


def _tell_tenant_backends(job, organization_id: int, method: str, value) -> None:
    """`value` to each backend that has run the organization's tasks and keeps that setting
    itself (its driver has `method`); a transient failure retries `job`."""
    for backend in Backend.objects.filter(pools__tasks__organization_id=organization_id).distinct():
        tell = getattr(driver_of(backend), method, None)
        if tell is None:
            continue
        try:
            tell(organization_id, value)
        except BackendError as exc:
            retry_if_transient(job, exc)


@shared_task
def schedule_park_queue(park_id: int) -> None:
    """One queue pass for one park (after a submit, a cancel or a finish)."""
    queue_pass(Park.objects.get(pk=park_id))


def queue_pass(park) -> None:
    """Place what fits; where a task that may not be preempted still waits, requeue the
    preemptible tasks that keep it out and pass again to place it on the room made."""
    scheduling.schedule_queue_pass(park=park)
    if preemption.preempt_for_waiting(park=park):
        scheduling.schedule_queue_pass(park=park)


@shared_task
def schedule_queues() -> int:
    """Every pass (beat): look at every task the backends have, then run each park's queue
    pass. Returns how many parks had tasks in flight."""
    submitted = Task.objects.filter(state__in=(TaskState.PLACED, TaskState.RUNNING)).exclude(
        backend_handle=""
    )
    for task_id in list(submitted.values_list("pk", flat=True)):
        follow_task(task_id)
    parks = Park.objects.filter(organizations__tasks__state=TaskState.QUEUED).distinct()
    count = 0
    for park in parks:
        queue_pass(park)
        count += 1
    return count


@shared_task
def reconcile_tasks() -> int:
    """Beat, every minute: hand again to their backend the tasks placed longer than
    LOAM_RECONCILE_AFTER_S ago that it never named (the job was lost or its worker killed
    before the backend answered); `run_task` re-checks, so one already handed over is left
    alone. Returns how many it sent."""
    stuck_before = timezone.now() - timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S)
    lost = (
        Task.objects.filter(state=TaskState.PLACED, backend_handle="")
        .annotate(placed_at=Max("workload__placements__created_at"))
        .filter(placed_at__lt=stuck_before)
        .values_list("pk", flat=True)
    )
    lost = list(lost)
    for task_id in lost:
        run_task.delay(task_id)
    return len(lost)


@shared_task
def probe_backends() -> int:
    """Capacity, health and accelerator telemetry of each enabled backend (idle detection and
    the node pages read it)."""
    backends = list(Backend.objects.filter(is_enabled=True).order_by("pk"))
    for backend in backends:
        services.probe_backend(backend=backend)
    return len(backends)


@shared_task
def sample_capacity() -> int:
    # Placement's kept rooms corrected where they drifted from the cards (on the same beat:
    # both read every node's cards).
    rooms.correct_rooms()
    return len(capacity.sample_capacity())
