"""Quota limits and their enforcement.

Usage is counted from the rows that hold resources (`QUOTA_HOLDERS`: instances in a holding
state with their open resizes, placed and running training tasks), so a reservation is simply
such a row: created on submit, given back when it is released, fails or ends. `reserve` checks
a demand against every limit while holding the organization's (and, where it has limits, the
park's) row lock, so two concurrent orders are counted one after the other and never both pass.
"""

from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.extensions import ExtensionPoint
from apps.core.transactions import lock
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.access import require_operator
from apps.tenants.models import Organization, Park


class QuotaExceeded(DomainError):
    code = "quota_exceeded"
    status = 409


@dataclass(frozen=True)
class Usage:
    """Resources held (or asked for). `by_model` counts accelerators per accelerator model id."""

    accelerators: int = 0
    compute_units: Decimal = Decimal(0)
    vcpu: int = 0
    ram_gb: int = 0
    disk_gb: int = 0
    instances: int = 0
    by_model: dict = field(default_factory=dict)

    def __add__(self, other: "Usage") -> "Usage":
        models = {**self.by_model}
        for model_id, count in other.by_model.items():
            models[model_id] = models.get(model_id, 0) + count
        return Usage(
            accelerators=self.accelerators + other.accelerators,
            compute_units=self.compute_units + other.compute_units,
            vcpu=self.vcpu + other.vcpu,
            ram_gb=self.ram_gb + other.ram_gb,
            disk_gb=self.disk_gb + other.disk_gb,
            instances=self.instances + other.instances,
            by_model=models,
        )

    def __sub__(self, other: "Usage") -> "Usage":
        negated = Usage(
            accelerators=-other.accelerators,
            compute_units=-other.compute_units,
            vcpu=-other.vcpu,
            ram_gb=-other.ram_gb,
            disk_gb=-other.disk_gb,
            instances=-other.instances,
            by_model={k: -v for k, v in other.by_model.items()},
        )
        return self + negated

    def positive(self) -> "Usage":
        """Only the growth: a shrink frees nothing until it is done."""
        return Usage(
            accelerators=max(0, self.accelerators),
            compute_units=max(Decimal(0), self.compute_units),
            vcpu=max(0, self.vcpu),
            ram_gb=max(0, self.ram_gb),
            disk_gb=max(0, self.disk_gb),
            instances=max(0, self.instances),
            by_model={k: v for k, v in self.by_model.items() if v > 0},
        )

    def amount(self, limit: QuotaLimit):
        if limit.resource == QuotaResource.MODEL_ACCELERATORS:
            return self.by_model.get(limit.accelerator_model_id, 0)
        return {
            QuotaResource.ACCELERATORS: self.accelerators,
            QuotaResource.COMPUTE_UNITS: self.compute_units,
            QuotaResource.VCPU: self.vcpu,
            QuotaResource.RAM_GB: self.ram_gb,
            QuotaResource.DISK_GB: self.disk_gb,
            QuotaResource.INSTANCES: self.instances,
        }.get(limit.resource)


def demand_for(*, flavor, system_disk_gb: int, data_disk_gb: int, count: int = 1) -> Usage:
    model = flavor.family.accelerator_model
    return Usage(
        accelerators=flavor.accelerator_count * count,
        compute_units=model.compute_units * flavor.accelerator_count * count,
        vcpu=flavor.vcpu * count,
        ram_gb=flavor.ram_gb * count,
        disk_gb=(system_disk_gb + data_disk_gb) * count,
        instances=count,
        by_model={model.pk: flavor.accelerator_count * count},
    )


# What holds quota is counted by the apps that own those rows, a floor above: orders counts its
# instances and their open resizes, orchestration its placed and running training tasks. Each
# plugs in a callable (organizations: a queryset of Organization) -> Usage.
QUOTA_HOLDERS = ExtensionPoint("rows that hold quota")


def usage_held(organizations) -> Usage:
    """Everything `organizations` hold, counted once by each holder."""
    total = Usage()
    for count in QUOTA_HOLDERS.providers():
        total += count(organizations)
    return total


def organization_usage(organization: Organization) -> Usage:
    return usage_held(Organization.objects.filter(pk=organization.pk))


def park_usage(park: Park) -> Usage:
    return usage_held(Organization.objects.filter(park=park))


def _limits(organization: Organization):
    return list(
        QuotaLimit.objects.filter(park=organization.park, organization=organization).select_related(
            "accelerator_model"
        )
    ), list(
        QuotaLimit.objects.filter(park=organization.park, organization__isnull=True).select_related(
            "accelerator_model"
        )
    )


def reserve(*, organization: Organization, demand: Usage) -> None:
    """Refuse `demand` (on top of what the organization and its park hold) if it passes a limit.

    Must run inside the transaction that creates the rows holding the demand: the locks taken
    here are held until it commits, so the next reservation counts those rows too.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("reserve() must run inside the transaction that holds the demand")
    lock(Organization, organization.pk)
    org_limits, park_limits = _limits(organization)
    if park_limits:
        lock(Park, organization.park_id)
    checks = []
    if org_limits:
        held = organization_usage(organization)
        checks += [(limit, held) for limit in org_limits]
    if park_limits:
        held = park_usage(organization.park)
        checks += [(limit, held) for limit in park_limits]
    for limit, held in checks:
        wanted = demand.amount(limit)
        if not wanted or wanted <= 0:
            continue
        used = held.amount(limit)
        if used + wanted > limit.limit:
            raise QuotaExceeded(_quota_message(limit, used, wanted))


def _quota_message(limit: QuotaLimit, used, wanted) -> str:
    what = (
        str(limit.accelerator_model)
        if limit.resource == QuotaResource.MODEL_ACCELERATORS
        else str(limit.get_resource_display())
    )
    values = {"what": what, "used": used, "wanted": wanted, "limit": limit.limit}
    if limit.organization_id:
        text = _(
            "Over your organization's quota for %(what)s: %(used)s in use + %(wanted)s asked "
            "exceeds the limit of %(limit)s. Release something or ask the park for more."
        )
    else:
        text = _(
            "The park's capacity limit for %(what)s is reached (%(used)s in use + %(wanted)s "
            "asked, limit %(limit)s). Try again later or choose another resource."
        )
    return text % values


@transaction.atomic
def apply_default_limits(*, organization: Organization, tier: str) -> None:
    """Give an organization the park's default limits for its tier ("unverified"/"verified").

    Limits only grow here: an operator's higher limit is kept, and a tier never lowers one.
    """
    for resource, default in settings.LOAM_DEFAULT_QUOTAS[tier].items():
        limit, created = QuotaLimit.objects.select_for_update(no_key=True).get_or_create(
            park=organization.park,
            organization=organization,
            resource=resource,
            accelerator_model=None,
            defaults={"limit": default},
        )
        if not created and limit.limit < default:
            limit.limit = default
            limit.save(update_fields=["limit", "updated_at"])


@transaction.atomic
def set_limit(*, limit: QuotaLimit, operator, value: int) -> QuotaLimit:
    """An operator changes one limit of their park (audited with the old and new value)."""
    require_operator(operator, limit.park, _("Only this park's operators may change its quotas."))
    if value < 0:
        raise DomainError(_("A limit cannot be negative."), code="limit")
    lock(QuotaLimit, limit.pk)
    limit.refresh_from_db()
    previous = limit.limit
    limit.limit = value
    limit.save(update_fields=["limit", "updated_at"])
    record_event(
        action="quota.changed",
        actor=operator,
        target=limit.organization or limit.park,
        data={"resource": limit.resource, "from": previous, "to": value},
    )
    return limit


@transaction.atomic
def add_quota_limit(
    *, organization: Organization, operator, resource: str, value: int, accelerator_model=None
) -> QuotaLimit:
    require_operator(
        operator, organization.park, _("Only this park's operators may change its quotas.")
    )
    if resource == QuotaResource.MODEL_ACCELERATORS and accelerator_model is None:
        raise ValidationError({"accelerator_model": _("Choose the accelerator model.")})
    if resource != QuotaResource.MODEL_ACCELERATORS:
        accelerator_model = None
    lock(Organization, organization.pk)
    limit = QuotaLimit(
        park=organization.park,
        organization=organization,
        resource=resource,
        accelerator_model=accelerator_model,
        limit=value,
    )
    limit.full_clean(validate_constraints=False)
    exists = QuotaLimit.objects.filter(
        organization=organization, resource=resource, accelerator_model=accelerator_model
    ).exists()
    if exists:
        raise ValidationError(
            _("The organization already has this limit: change it in the table above.")
        )
    try:
        with transaction.atomic():
            limit.save()
    except IntegrityError:
        raise ValidationError(_("The organization already has this limit.")) from None
    record_event(
        action="quota.changed",
        actor=operator,
        target=organization,
        data={
            "resource": resource,
            "accelerator_model": accelerator_model.slug if accelerator_model else None,
            "from": None,
            "to": value,
        },
    )
    return limit
