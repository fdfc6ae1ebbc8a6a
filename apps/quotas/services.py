"""Quota limits and their enforcement.

Usage is counted from the rows that hold resources (`QUOTA_HOLDERS`: instances in a holding
state with their open resizes, placed and running training tasks), so a reservation is simply
such a row: created on submit, given back when it is released, fails or ends. `reserve` checks
a demand against every limit while holding the organization's (and, where it has limits, the
park's) row lock, so two concurrent orders are counted one after the other and never both pass.
Its rules are one `QuotaChecker`'s, which quotes, the catalog and the scheduling pass use too.

The monthly spend limit is the exception: spend is not held by rows but accrues. What counts
against it is what is committed this month (`COMMITTED_SPEND`, provided by billing): what was
charged, plus the first hours the wallet still holds for hosts ordered but not yet metered. An
order adds its first hour (what its hosts cost an hour, the amount the wallet holds when it is
placed); it is refused when the committed spend plus that first hour passes the limit, and once
the committed spend has reached the limit every new order is refused. It is read under the
same locks as the other limits, so concurrent orders are counted one after the other. Running
hosts are never stopped for it.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from apps.catalog.models import PriceKind
from apps.catalog.selectors import prices_in_force
from apps.core import sql
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.extensions import ExtensionPoint
from apps.core.money import format_money
from apps.core.numbers import figure
from apps.core.transactions import lock, lock_all
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.access import require_operator
from apps.tenants.models import Organization, Park


class QuotaExceeded(DomainError):
    code = "quota_exceeded"
    status = 409


@dataclass(frozen=True)
class Usage:
    """Resources held (or asked for). `by_model` counts accelerators per accelerator model id.

    A demand also says what it costs an hour, for the monthly spend limit: `hourly_minor` when
    the caller knows its price (its quote), else `flavors` (flavor id -> hosts), priced at the
    flavor's lowest hourly price in force when a spend limit has to be checked. Spend is never
    held by rows, so neither field takes part in comparing usages.
    """

    accelerators: int = 0
    compute_units: Decimal = Decimal(0)
    vcpu: int = 0
    ram_gb: int = 0
    disk_gb: int = 0
    instances: int = 0
    storage_gb: int = 0
    by_model: dict = field(default_factory=dict)
    hourly_minor: int = field(default=0, compare=False)
    flavors: dict = field(default_factory=dict, compare=False)

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            accelerators=self.accelerators + other.accelerators,
            compute_units=self.compute_units + other.compute_units,
            vcpu=self.vcpu + other.vcpu,
            ram_gb=self.ram_gb + other.ram_gb,
            disk_gb=self.disk_gb + other.disk_gb,
            instances=self.instances + other.instances,
            storage_gb=self.storage_gb + other.storage_gb,
            by_model=_merged(self.by_model, other.by_model),
            hourly_minor=self.hourly_minor + other.hourly_minor,
            flavors=_merged(self.flavors, other.flavors),
        )

    def __sub__(self, other: "Usage") -> "Usage":
        negated = Usage(
            accelerators=-other.accelerators,
            compute_units=-other.compute_units,
            vcpu=-other.vcpu,
            ram_gb=-other.ram_gb,
            disk_gb=-other.disk_gb,
            instances=-other.instances,
            storage_gb=-other.storage_gb,
            by_model={k: -v for k, v in other.by_model.items()},
            hourly_minor=-other.hourly_minor,
            flavors={k: -v for k, v in other.flavors.items()},
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
            storage_gb=max(0, self.storage_gb),
            by_model={k: v for k, v in self.by_model.items() if v > 0},
            # The price of a resize is the difference of its sizes' prices: kept whole, and
            # never below zero once priced (`spend_minor`).
            hourly_minor=self.hourly_minor,
            flavors=dict(self.flavors),
        )

    def asks_anything(self) -> bool:
        counted = (
            self.accelerators,
            self.compute_units,
            self.vcpu,
            self.ram_gb,
            self.disk_gb,
            self.instances,
            self.storage_gb,
        )
        return any(value > 0 for value in counted) or any(
            count > 0 for count in self.by_model.values()
        )

    def spend_minor(self) -> int:
        """What this demand costs an hour (its first hour), in minor units, never below zero."""
        total = self.hourly_minor
        wanted = {pk: count for pk, count in self.flavors.items() if count}
        if wanted:
            lowest: dict[int, int] = {}
            for price in prices_in_force(kind=PriceKind.FLAVOR_HOUR, flavor_id__in=list(wanted)):
                current = lowest.get(price.flavor_id)
                if current is None or price.amount_minor < current:
                    lowest[price.flavor_id] = price.amount_minor
            total += sum(lowest.get(pk, 0) * count for pk, count in wanted.items())
        return max(0, total)

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
            QuotaResource.STORAGE_GB: self.storage_gb,
        }.get(limit.resource)


def _merged(a: dict, b: dict) -> dict:
    merged = {**a}
    for key, count in b.items():
        merged[key] = merged.get(key, 0) + count
    return merged


def demand_for(
    *,
    flavor,
    system_disk_gb: int,
    data_disk_gb: int,
    count: int = 1,
    hourly_minor: int | None = None,
) -> Usage:
    """What `count` hosts of `flavor` hold. `hourly_minor` is what they cost an hour together
    (their quote, disk and bandwidth included); without it the monthly spend limit prices them
    at the flavor's lowest hourly price in force."""
    model = flavor.family.accelerator_model
    priced = (
        {"hourly_minor": hourly_minor}
        if hourly_minor is not None
        else {"flavors": {flavor.pk: count}}
    )
    return Usage(
        accelerators=flavor.accelerator_count * count,
        compute_units=model.compute_units * flavor.accelerator_count * count,
        vcpu=flavor.vcpu * count,
        ram_gb=flavor.ram_gb * count,
        disk_gb=(system_disk_gb + data_disk_gb) * count,
        instances=count,
        by_model={model.pk: flavor.accelerator_count * count},
        **priced,
    )


# What holds quota is counted by the apps that own those rows, a floor above: orders counts its
# instances and their open resizes, orchestration its placed and running training tasks,
# storage its volumes, agents the images kept. Each plugs in a QuotaHolder.
QUOTA_HOLDERS = ExtensionPoint("rows that hold quota")


class QuotaHolder:
    """How an app counts what its rows hold: `query(organizations)` is the read, (sql,
    params), of what `organizations` (a queryset of Organization, or a list of their ids or
    rows) hold, and `count(rows)` its rows' Usage. Called with the organizations, it counts
    them alone; `usage_held` reads every holder's rows in one statement (counted on every
    order). Made with `quota_holder`, it is named as its `count` is."""

    def __init__(self, model, query: Callable, count: Callable):
        self.model, self.query, self.count = model, query, count
        functools.update_wrapper(self, count)

    def __call__(self, organizations) -> Usage:
        return counted_together([self], organizations)


def quota_holder(model, query: Callable):
    """Decorate a holder's `count(rows) -> Usage` to make it a QuotaHolder of `model`'s rows
    read by `query`."""
    return lambda count: QuotaHolder(model, query, count)


def counted_together(holders, organizations) -> Usage:
    """What `organizations` hold, counted by each of `holders`, their reads made together."""
    holders = list(holders)
    if not holders:
        return Usage()
    rows = sql.fetch_each(holders[0].model, [holder.query(organizations) for holder in holders])
    total = Usage()
    for holder, read in zip(holders, rows, strict=True):
        total += holder.count(read)
    return total


def usage_held(organizations) -> Usage:
    """Everything `organizations` hold, counted once by each holder."""
    return counted_together(QUOTA_HOLDERS.providers(), organizations)


# This month's committed spend is billing's (its usage records and wallet holds), a floor above:
# billing plugs in a callable (organizations: a queryset of Organization) -> int, the minor
# units charged since the start of the current month (the park's time zone) plus those held.
COMMITTED_SPEND = ExtensionPoint("this month's committed spend")


def committed_spend(organizations) -> int:
    return sum(spend(organizations) for spend in COMMITTED_SPEND.providers())


def organization_usage(organization: Organization) -> Usage:
    # Its id, not a queryset of one: every holder's query then filters by a value, not a
    # subquery (this is counted on every order).
    return usage_held([organization.pk])


def park_usage(park: Park) -> Usage:
    return usage_held(Organization.objects.filter(park=park))


def lock_quota_scope(*, park_id: int, organization_ids: list[int]) -> "QuotaChecker":
    """The locks `reserve` takes, in its order: the organizations (by id), then their park where
    the park has limits. A use case that locks the wallet too takes these first (as an order
    does). Returns the checker of their limits, read between the two."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError(
            "the quota's locks must be taken inside the transaction that holds the demand"
        )
    lock_all(Organization, organization_ids)
    checker = QuotaChecker(park_id=park_id, organization_ids=organization_ids)
    if checker.park_limited:
        lock(Park, park_id)
    return checker


def reserve(*, organization: Organization, demand: Usage) -> None:
    """Refuse `demand` (on top of what the organization and its park hold) if it passes a limit.

    Must run inside the transaction that creates the rows holding the demand: the locks taken
    here are held until it commits, so the next reservation counts those rows too. What is
    held is counted once per scope (the organization's usage for all of its limits, the park's
    for all of the park's), after the lock of that scope is taken.
    """
    checker = lock_quota_scope(park_id=organization.park_id, organization_ids=[organization.pk])
    held, park_held = checker.count_held(organization)
    checker.check(organization, demand, held=held, park_held=park_held)


def quota_refusal(*, organization: Organization, demand: Usage) -> str | None:
    """What `reserve` would refuse `demand` with now (None: it fits), read without its locks:
    for a quote, warning before the order is sent. The order is checked again under them."""
    return quota_refusals(organization=organization, demands={None: demand}).get(None)


def quota_refusals(*, organization: Organization, demands: Mapping) -> dict:
    """`quota_refusal` for each of `demands` ({key: Usage}): {key: refusal} for those that
    would not fit. What the quotas stand at is read once for all of them (the catalog asks
    for each of its cards)."""
    checker = QuotaChecker(park_id=organization.park_id, organization_ids=[organization.pk])
    held, park_held = checker.count_held(organization)
    refusals = {}
    for key, demand in demands.items():
        try:
            checker.check(organization, demand, held=held, park_held=park_held)
        except QuotaExceeded as refusal:
            refusals[key] = refusal.message
    return refusals


def flavor_refusals(organization: Organization, offers: list) -> dict[int, str]:
    """{flavor id: the quota refusal} for the offers ([(flavor, hourly price or None), …]) of
    which one host with the flavor's system disk would not fit the organization's quotas now:
    the catalog's `ORDER_REFUSALS`."""
    demands = {
        flavor.pk: demand_for(
            flavor=flavor,
            system_disk_gb=flavor.system_disk_gb,
            data_disk_gb=0,
            hourly_minor=hourly_minor,
        )
        for flavor, hourly_minor in offers
    }
    return quota_refusals(organization=organization, demands=demands)


_LIMIT_COLUMNS = ("id", "park_id", "organization_id", "resource", "accelerator_model_id", "limit")
# Written out: read on every order, where the ORM took several times the statement's CPU.
_LIMITS_SQL = f"""
SELECT {", ".join(f'quota."{column}"' for column in _LIMIT_COLUMNS)}
FROM quotas_quotalimit quota
WHERE quota.park_id = %s
    AND (quota.organization_id IN ({{organizations}}) OR quota.organization_id IS NULL)
ORDER BY quota.id
"""


class QuotaChecker:
    """The quota's rules, in one place: the limits of a park and of some of its organizations,
    read once (one query), against which demand after demand is checked. `reserve` checks one
    demand under the quota's locks (`lock_quota_scope`), `quota_refusals` several without them
    (a quote, the catalog's cards), a scheduling pass each task it places, under the locks it
    holds for the whole pass.

    What is held is the caller's to give with each demand: `count_held` counts it as reserve
    does; a pass counts it once and keeps it up to date as it places tasks. Per monthly spend
    limit, the month's committed spend is read once, when a demand first meets it: no demand
    checked with one checker adds to it (reserve checks one, a quote's are alternatives, a
    pass's tasks ask for no first hour).
    """

    def __init__(self, *, park_id: int, organization_ids: list[int]):
        self._organization_limits: dict[int, list[QuotaLimit]] = {}
        self._park_limits: list[QuotaLimit] = []
        members, params = sql.members(organization_ids)
        rows = sql.fetch_all(
            QuotaLimit, _LIMITS_SQL.format(organizations=members), [park_id, *params]
        )
        for row in rows:
            # A refusal naming a model reads it then (`_quota_message`).
            limit = QuotaLimit(**dict(zip(_LIMIT_COLUMNS, row, strict=True)))
            if limit.organization_id is None:
                self._park_limits.append(limit)
            else:
                self._organization_limits.setdefault(limit.organization_id, []).append(limit)
        self._spent: dict[int, int] = {}

    @property
    def park_limited(self) -> bool:
        return bool(self._park_limits)

    def limited(self, organization_id: int) -> bool:
        return bool(self._organization_limits.get(organization_id))

    def count_held(self, organization: Organization) -> tuple[Usage, Usage]:
        """(what the organization holds, what its park holds), each counted once from every
        holder, and only where it has limits (else nothing)."""
        held = organization_usage(organization) if self.limited(organization.pk) else Usage()
        park_held = park_usage(organization.park) if self.park_limited else Usage()
        return held, park_held

    def check(
        self, organization: Organization, demand: Usage, *, held: Usage, park_held: Usage
    ) -> None:
        """Raise QuotaExceeded if `demand`, on top of what the organization holds (`held`) or
        its park holds (`park_held`), passes one of the organization's limits or the park's:
        the first it passes, the organization's before the park's."""
        checks = [(limit, held) for limit in self._organization_limits.get(organization.pk, ())]
        checks += [(limit, park_held) for limit in self._park_limits]
        spend_wanted = None
        for limit, usage in checks:
            if limit.resource == QuotaResource.MONTHLY_SPEND:
                if spend_wanted is None:
                    spend_wanted = demand.spend_minor()
                self._check_spend(organization, limit, spend_wanted, asks=demand.asks_anything())
                continue
            wanted = demand.amount(limit)
            if not wanted or wanted <= 0:
                continue
            used = usage.amount(limit)
            if used + wanted > limit.limit:
                raise QuotaExceeded(_quota_message(limit, used, wanted))

    def _check_spend(
        self, organization: Organization, limit: QuotaLimit, wanted: int, *, asks: bool
    ) -> None:
        """The month's committed spend plus the demand's first hour (`wanted`) must stay within
        the limit; once the committed spend has reached it, nothing new is accepted (even what
        costs nothing an hour)."""
        if limit.pk not in self._spent:
            self._spent[limit.pk] = committed_spend(spend_scope(limit))
        used = self._spent[limit.pk]
        if wanted <= 0 and not asks:
            return
        if used >= limit.limit or used + wanted > limit.limit:
            currency = organization.park.currency
            raise QuotaExceeded(
                _quota_message(
                    limit,
                    format_money(used, currency),
                    format_money(wanted, currency),
                    shown_limit=format_money(limit.limit, currency),
                )
            )


def spend_scope(limit: QuotaLimit):
    """The organizations whose spend a monthly spend limit counts."""
    if limit.organization_id:
        return Organization.objects.filter(pk=limit.organization_id)
    return Organization.objects.filter(park_id=limit.park_id)


def _quota_message(limit: QuotaLimit, used, wanted, *, shown_limit=None) -> str:
    what = (
        str(limit.accelerator_model)
        if limit.resource == QuotaResource.MODEL_ACCELERATORS
        else str(limit.get_resource_display())
    )
    values = {
        "what": what,
        **{
            name: value if isinstance(value, str) else figure(value)  # money comes formatted
            for name, value in (
                ("used", used),
                ("wanted", wanted),
                ("limit", limit.limit if shown_limit is None else shown_limit),
            )
        },
    }
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


# A backend that enforces an organization's accelerator limit itself (a Slurm account's
# GrpTRES) is told when it changes; backends are orchestration's, a floor above. Each provider
# is a callable (organization_id), run inside the transaction that changed the limit.
ACCELERATOR_LIMIT_CHANGED = ExtensionPoint("an organization's accelerator limit changed")


def _accelerator_limit_changed(limit: QuotaLimit) -> None:
    if limit.organization_id and limit.resource == QuotaResource.ACCELERATORS:
        for tell in ACCELERATOR_LIMIT_CHANGED.providers():
            tell(limit.organization_id)


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
        raised = not created and limit.limit < default
        if raised:
            limit.limit = default
            limit.save(update_fields=["limit", "updated_at"])
        if created or raised:
            _accelerator_limit_changed(limit)


@transaction.atomic(durable=True)
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
    _accelerator_limit_changed(limit)
    return limit


@transaction.atomic(durable=True)
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
    _accelerator_limit_changed(limit)
    return limit
