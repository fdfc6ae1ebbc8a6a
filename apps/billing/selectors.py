"""Reads for the billing pages: balances, usage over time, the month's estimate, revenue."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import CharField, Count, F, Min, Q, Sum, Value
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.metering import amount_for, day_start, due, month_start, next_month_start
from apps.billing.models import (
    Invoice,
    InvoiceState,
    Meter,
    MeterKind,
    MonthlySpend,
    UsageRecord,
    Wallet,
)
from apps.catalog.models import Vendor
from apps.core.money import format_money
from apps.tenants.models import Organization


def _group_expression(group: str):
    if group == "flavor":
        return Coalesce(F("workload__instance__flavor__code"), Value(_("training tasks")))
    if group == "vendor":
        return Coalesce(
            F("workload__instance__flavor__family__accelerator_model__vendor"),
            F("workload__task__pool__accelerator_model__vendor"),
            Value("other"),
            output_field=CharField(),
        )
    return F("kind")


def with_subject_ids(rows):
    """Usage records or invoice lines (a queryset), each with the id of the host (`instance`)
    or of the task (`task`) it is of, read through its workload."""
    return rows.annotate(instance=F("workload__instance"), task=F("workload__task"))


def month_spend(organizations, *, now=None) -> int:
    """What `organizations` (a queryset or ids) were charged this month (the park's time zone):
    a row of MonthlySpend each, however many records metering wrote."""
    month = month_start(now or timezone.now()).date()
    total = MonthlySpend.objects.filter(organization__in=organizations, month=month).aggregate(
        total=Sum("amount_minor")
    )["total"]
    return total or 0


def committed_spend(organizations) -> int:
    """What `organizations` (a queryset) have committed to this month, the quotas'
    COMMITTED_SPEND provider: what they were charged, plus what their wallets still hold for
    their hosts' first hours. Holds are drawn down as usage is charged, so nothing is counted
    twice; without them, every order placed before the next metering pass would count as free."""
    held = Wallet.objects.filter(organization__in=organizations).aggregate(total=Sum("held_minor"))[
        "total"
    ]
    return month_spend(organizations) + (held or 0)


def usage_series(organization: Organization, *, days: int = 30, group: str = "flavor", now=None):
    """{"x": [days], "series": [{"name", "data": [minor per day]}]}, one series per group.

    A record holds a meter's use of a day (`UsageRecord.day`): the chart reads the days' records
    alone (the organization's and day index, usage_organization_day) and groups them on their
    day, where it read every record the organization ever had to find the days of their starts
    in the park's time zone. Records written a pass each, before days, have none: their start's
    day is theirs."""
    now = now or timezone.now()
    first_day = timezone.localdate(now) - timedelta(days=days - 1)
    since = timezone.make_aware(datetime.combine(first_day, time()))
    rows = (
        UsageRecord.objects.filter(organization=organization)
        .filter(Q(day__gte=first_day) | Q(day__isnull=True, started_at__gte=since))
        .annotate(date=Coalesce("day", TruncDate("started_at")), key=_group_expression(group))
        .values("date", "key")
        .annotate(amount=Sum("amount_minor"))
        .order_by()
    )
    day_list = [first_day + timedelta(days=n) for n in range(days)]
    index = {day: n for n, day in enumerate(day_list)}
    series: dict[str, list[int]] = {}
    for row in rows:
        if row["date"] in index:
            series.setdefault(row["key"], [0] * days)[index[row["date"]]] += row["amount"]
    names = _group_labels(group)
    return {
        "x": [day.isoformat() for day in day_list],
        "series": [
            {"name": str(names.get(key, key)), "data": data} for key, data in sorted(series.items())
        ],
    }


def _group_labels(group: str) -> dict:
    if group == "vendor":
        return {**dict(Vendor.choices), "other": _("Other")}
    if group == "kind":
        return dict(MeterKind.choices)
    return {}


@dataclass(frozen=True)
class MonthEstimate:
    currency: str
    metered_minor: int  # recorded this month so far
    accrued_minor: int  # run since the last metering, not recorded yet
    projected_minor: int  # the rest of the month at today's rate
    hourly_minor: int

    @property
    def so_far_minor(self) -> int:
        return self.metered_minor + self.accrued_minor

    @property
    def total_minor(self) -> int:
        return self.so_far_minor + self.projected_minor


def _metered_since(organization: Organization, since: datetime) -> int:
    return (
        UsageRecord.objects.filter(organization=organization, started_at__gte=since).aggregate(
            total=Sum("amount_minor")
        )["total"]
        or 0
    )


def _unrecorded_meters(organization: Organization):
    return due(Meter.objects.filter(organization=organization))


def _accrued(meters, now: datetime) -> tuple[int, Decimal]:
    """(what `meters` ran up to `now` that metering has not recorded yet, what the open ones
    cost an hour). A meter closed since the last pass counts to its end: its charge is owed
    from the moment it closed, not from when metering records it; an open one counts as far as
    metering will measure it (`Meter.known_until`), so a task's cost so far never runs ahead of
    what its backend has said and then drops back."""
    accrued, hourly = 0, Decimal(0)
    # Their columns alone: an organization of 1,000 hosts has thousands of meters open, and
    # making a model of each cost its billing page more than the arithmetic.
    columns = ("started_at", "ended_at", "known_until", "hourly_minor", "metered_minor")
    for started_at, ended_at, known_until, hourly_minor, metered_minor in meters.values_list(
        *columns
    ):
        end = min(now, ended_at or known_until or now)
        seconds = max(0, int((end - started_at).total_seconds()))
        accrued += max(0, amount_for(hourly_minor, seconds) - metered_minor)
        if ended_at is None:
            hourly += hourly_minor
    return accrued, hourly


def month_estimate(organization: Organization, *, now: datetime | None = None) -> MonthEstimate:
    now = now or timezone.now()
    metered = month_spend([organization.pk], now=now)
    accrued, hourly = _accrued(_unrecorded_meters(organization), now)
    hours_left = (next_month_start(now) - now).total_seconds() / 3600
    return MonthEstimate(
        currency=organization.park.currency,
        metered_minor=metered,
        accrued_minor=accrued,
        projected_minor=amount_for(hourly, int(hours_left * 3600)),
        hourly_minor=int(hourly),
    )


def today_spend(organization: Organization, *, now: datetime | None = None) -> int:
    """What the organization spent since midnight (the park's time zone): usage recorded today
    and what its running meters ran since they were last metered (minutes at most)."""
    now = now or timezone.now()
    accrued, _hourly = _accrued(_unrecorded_meters(organization), now)
    return _metered_since(organization, day_start(now)) + accrued


@dataclass(frozen=True)
class InstanceCost:
    currency: str
    so_far_minor: int  # metered and accrued, since it was ordered
    hourly_minor: int  # what it costs an hour now (compute while running, disk, bandwidth)
    running_since: datetime | None  # when its current run started; None while not running


def instance_cost(instance, *, now: datetime | None = None) -> InstanceCost:
    """What one host has cost so far and costs now, for its page: what was metered and what its
    meters ran since (closed ones to their end), so the figure never runs backwards and is the
    bill once metered."""
    so_far, hourly = _cost_so_far(now or timezone.now(), instance.workload_id)
    return InstanceCost(
        currency=instance.organization.park.currency,
        so_far_minor=so_far,
        hourly_minor=int(hourly.quantize(Decimal(1), rounding=ROUND_HALF_UP)),
        running_since=_running_since(instance),
    )


def task_cost_minor(task, *, now: datetime | None = None) -> int:
    """What a training task has cost so far: all of it once it has ended."""
    return _cost_so_far(now or timezone.now(), task.workload_id)[0]


def _cost_so_far(now: datetime, workload_id: int) -> tuple[int, Decimal]:
    """(what the host's or task's workload has cost up to `now`: metered, and what its meters
    ran since, closed ones to their end; what its open meters cost an hour)."""
    metered = UsageRecord.objects.filter(workload_id=workload_id).aggregate(
        total=Sum("amount_minor")
    )["total"]
    accrued, hourly = _accrued(due(Meter.objects.filter(workload_id=workload_id)), now)
    return (metered or 0) + accrued, hourly


def _running_since(instance) -> datetime | None:
    """When the host's current run began: its open compute meter's start, carried back over the
    meters a resize closed at the moment the next opened (a resize doesn't stop the host)."""
    compute = Meter.objects.filter(
        workload_id=instance.workload_id, kind=MeterKind.COMPUTE
    ).order_by("-started_at", "-pk")
    since = None
    for started_at, ended_at in compute.values_list("started_at", "ended_at"):
        if since is None:
            if ended_at is not None:
                return None  # not running
            since = started_at
        elif ended_at < since:
            break  # stopped in between
        else:
            since = started_at
    return since


def wallet_for(organization: Organization) -> Wallet | None:
    """The organization's wallet, or None before its first top-up or order (nothing created)."""
    return Wallet.objects.filter(organization=organization).first()


# --- Operators -----------------------------------------------------------------------------


def revenue_by_month(park, *, months: int = 12, now=None) -> list[dict]:
    """Usage billed per month (what tenants were charged, tax included), newest last, with the
    number of tenants billed in it."""
    since = month_start(now or timezone.now())
    for _month in range(months - 1):
        since = month_start(since - timedelta(days=1))
    per_month = (
        MonthlySpend.objects.filter(organization__park=park, month__gte=since.date())
        .values_list("month")
        .annotate(amount=Sum("amount_minor"), tenants=Count("organization"))
        .order_by("month")
    )
    return [
        {"month": month, "amount": amount, "tenants": tenants}
        for month, amount, tenants in per_month
    ]


def top_tenants(park, *, month: date, limit: int = 10) -> list[Organization]:
    """The tenants that spent most in `month` (its first day), each with `spent`; equal spends
    are listed by name."""
    spends = (
        MonthlySpend.objects.filter(organization__park=park, month=month, amount_minor__gt=0)
        .select_related("organization")
        .order_by("-amount_minor", "organization__name")[:limit]
    )
    top = []
    for spend in spends:
        spend.organization.spent = spend.amount_minor
        top.append(spend.organization)
    return top


def outstanding_wallets(park):
    """Wallets in debt or out of money, the deepest first, with their unpaid invoices."""
    unpaid = Sum(
        "organization__invoices__total_minor",
        filter=Q(organization__invoices__state=InvoiceState.ISSUED),
    )
    return (
        Wallet.objects.filter(organization__park=park)
        .filter(Q(balance_minor__lt=0) | Q(balance_minor__lte=F("held_minor")))
        .select_related("organization")
        .annotate(unpaid_minor=Coalesce(unpaid, 0))
        .order_by("balance_minor", "organization__name")
    )


def invoices_for(organization: Organization):
    return Invoice.objects.filter(organization=organization).order_by("-period_start")


@dataclass(frozen=True)
class InvoiceItem:
    """One line of an invoice as its page shows it: a flavor's hosts, a size of disk or of
    bandwidth, or training tasks, at one rate; its hosts' and tasks' lines summed."""

    label: str
    kind: str
    kind_label: str
    seconds: int
    hourly_minor: Decimal | None  # the rate per hour; None on lines issued before it was kept
    amount_minor: int
    currency: str

    @property
    def hours(self) -> Decimal:
        return (Decimal(self.seconds) / 3600).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    @property
    def unit_price(self) -> str:
        """The rate per hour in fen, or in ten-thousandths of a yuan where a disk's or a
        bandwidth's monthly price makes it finer: ¥25.00, ¥0.0694."""
        if self.hourly_minor is None:
            return "—"
        whole_fen = self.hourly_minor == self.hourly_minor.to_integral_value()
        return format_money(self.hourly_minor, self.currency, places=2 if whole_fen else 4)


def invoice_lines(invoice: Invoice) -> list:
    """The invoice's lines in order, with their hosts' flavors and their tasks: what its page
    lists one by one and sums (`invoice_items`)."""
    return list(
        invoice.lines.select_related(
            "workload__instance__flavor__family__accelerator_model", "workload__task"
        )
    )


def invoice_items(invoice: Invoice, lines: list) -> list[InvoiceItem]:
    """The invoice's `lines` (`invoice_lines`) summed per flavor (hosts), per size (disk,
    bandwidth) and per rate (tasks), in the order of their first line; their amounts add up to
    the invoice's total."""
    groups: dict[tuple, dict] = {}
    for line in lines:
        if line.kind == MeterKind.COMPUTE and line.workload_id:  # a host's running time
            flavor = line.workload.instance.flavor
            key = (line.kind, flavor.pk, line.hourly_minor)
            label = f"{flavor.code} · {flavor.accelerator_count} × {flavor.accelerator_model}"
        elif line.kind == MeterKind.DISK:
            key, label = (line.kind, line.quantity, line.hourly_minor), f"{line.quantity} GB"
        elif line.kind == MeterKind.IMAGE:
            label = f"{line.get_kind_display()} · {line.quantity} GB"
            key = (line.kind, line.quantity, line.hourly_minor)
        elif line.kind == MeterKind.BANDWIDTH:
            key, label = (line.kind, line.quantity, line.hourly_minor), f"{line.quantity} Mbps"
        else:
            key, label = (line.kind, line.hourly_minor), line.get_kind_display()
        group = groups.setdefault(
            key,
            {"label": label, "line": line, "seconds": 0, "amount_minor": 0},
        )
        group["seconds"] += line.seconds
        group["amount_minor"] += line.amount_minor
    return [
        InvoiceItem(
            label=group["label"],
            kind=group["line"].kind,
            kind_label=group["line"].get_kind_display(),
            seconds=group["seconds"],
            hourly_minor=group["line"].hourly_minor,
            amount_minor=group["amount_minor"],
            currency=invoice.currency,
        )
        for group in groups.values()
    ]


# --- Monitoring ----------------------------------------------------------------------------


def metering_lag_seconds(*, now: datetime | None = None) -> float:
    """How far metering is behind: the seconds since the moment up to which the least recently
    metered meter was measured, among the meters metering still owes (open ones, and closed
    ones not yet measured to their end). 0 when nothing is owed.

    A pass every interval keeps it between 0 and about one interval; more means metering fell
    behind (the `/metrics` gauge `loam_metering_lag_seconds`)."""
    oldest = Meter.objects.filter(
        Q(ended_at__isnull=True) | Q(metered_until__lt=F("ended_at"))
    ).aggregate(oldest=Min("metered_until"))["oldest"]
    if oldest is None:
        return 0.0
    return max(0.0, ((now or timezone.now()) - oldest).total_seconds())
