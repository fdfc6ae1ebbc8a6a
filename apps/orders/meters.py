"""What a host pays for in each state, at the rates fixed on it when it was ordered: the meters
that billing keeps open while it holds resources."""

from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from apps.billing.metering import HOURS_PER_MONTH, MeterSpec, billed_disk_gb, reconcile
from apps.billing.models import Meter, MeterKind
from apps.core.transactions import in_transaction
from apps.orders.models import Instance, InstanceState

# A host's disk exists, and costs, from its first start until it is released.
DISK_BILLED_STATES = frozenset(
    {
        InstanceState.RUNNING,
        InstanceState.STOPPING,
        InstanceState.STOPPED,
        InstanceState.STARTING,
        InstanceState.RESIZING,
        InstanceState.RELEASING,
    }
)


def instance_meters(instance) -> list[MeterSpec]:
    """What `instance` should be paying for in its current state, at its fixed rates."""
    rates = instance.rates
    if not rates:  # ordered before metering existed, or never priced
        return []
    specs = []
    if instance.state == InstanceState.RUNNING and instance.without_cards:
        # 无卡模式: a CPU host's price, and no card's compute.
        specs.append(MeterSpec(MeterKind.COMPUTE, 1, Decimal(rates["no_card_hour"]), Decimal(0)))
    elif instance.state == InstanceState.RUNNING:
        flavor = instance.flavor
        units = flavor.family.accelerator_model.compute_units * flavor.accelerator_count
        specs.append(MeterSpec(MeterKind.COMPUTE, 1, Decimal(rates["flavor_hour"]), Decimal(units)))
        if instance.bandwidth_mbps:
            monthly = Decimal(rates["bandwidth_mbps_month"]) * instance.bandwidth_mbps
            specs.append(
                MeterSpec(MeterKind.BANDWIDTH, instance.bandwidth_mbps, monthly / HOURS_PER_MONTH)
            )
    if instance.state in DISK_BILLED_STATES:
        disk = billed_disk_gb(
            flavor=instance.flavor,
            system_disk_gb=instance.system_disk_gb,
            data_disk_gb=instance.data_disk_gb,
        )
        if disk:
            monthly = Decimal(rates["disk_gb_month"]) * disk
            specs.append(MeterSpec(MeterKind.DISK, disk, monthly / HOURS_PER_MONTH))
    return [spec for spec in specs if spec.hourly_minor > 0]


@in_transaction
def follow_instance(instance, *, at: datetime | None = None, created: bool = False) -> None:
    """Close the meters that no longer match the instance and open the ones it now needs.
    `instance` is the row as its last move or save left it; `created`: this transaction created
    it, so it has no meters to read yet."""
    if instance.state in DISK_BILLED_STATES:  # its meters are priced from its flavor's model
        instance = Instance.objects.select_related("flavor__family__accelerator_model").get(
            pk=instance.pk
        )
    reconcile(
        None if created else Meter.objects.filter(workload_id=instance.workload_id),
        specs=instance_meters(instance),
        new=dict(organization_id=instance.organization_id, workload_id=instance.workload_id),
        currency=instance.rates.get("currency", ""),
        at=at or timezone.now(),
    )
