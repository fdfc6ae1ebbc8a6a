"""What a training task pays for: its fixed hourly price while it runs (the meter billing
keeps), measured as far as its backend has said it ran (`billing.Meter.known_until`): the
backend's own start and end are what is billed, however late the portal learns of them."""

from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from apps.billing.metering import MeterSpec, reconcile
from apps.billing.models import Meter, MeterKind
from apps.core.transactions import in_transaction
from apps.orchestration.models import Task, TaskState


def task_meters(task) -> list[MeterSpec]:
    if task.state != TaskState.RUNNING or not task.hourly_minor:
        return []
    units = Decimal(0)
    if task.pool_id:
        units = (
            task.pool.accelerator_model.compute_units * Decimal(task.total_accelerator_milli) / 1000
        )
    return [MeterSpec(MeterKind.TASK, 1, Decimal(task.hourly_minor), units)]


@in_transaction
def follow_task(task, *, at: datetime | None = None) -> None:
    task = Task.objects.select_related("pool__accelerator_model").get(pk=task.pk)
    at = at or timezone.now()
    reconcile(
        Meter.objects.filter(workload_id=task.workload_id),
        specs=task_meters(task),
        new=dict(
            organization_id=task.organization_id, workload_id=task.workload_id, known_until=at
        ),
        currency=task.organization.park.currency,
        at=at,
    )
