"""Invoices: a statement of one organization's usage records over a period, with tax.

Metered prices include tax. The wallet is charged each usage record's amount as it accrues, so
an invoice's total is the sum of its records, exactly what was charged; the invoice states the
tax included in that total (`included_tax`) and the amount net of it (`subtotal_minor`).
"""

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing import metering
from apps.billing.models import (
    INVOICE_TRANSITIONS,
    BillingMode,
    Invoice,
    InvoiceLine,
    InvoiceState,
    Meter,
    UsageRecord,
    Wallet,
)
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.transactions import lock
from apps.core.transitions import transition
from apps.tenants.access import require_operator
from apps.tenants.models import Organization
from apps.webhooks.services import emit_event
from apps.workloads.models import WorkloadKind


class NothingToInvoice(DomainError):
    code = "nothing_to_invoice"
    status = 409


def included_tax(total_minor: int, rate: Decimal) -> int:
    """The tax included in a tax-inclusive `total_minor`: the total less the net amount, which
    is total ÷ (1 + rate) rounded half up to the minor unit."""
    net = (Decimal(total_minor) / (1 + rate)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return total_minor - int(net)


def next_period_start(organization: Organization) -> datetime | None:
    """Invoices tile time: each starts where the last ended; the first at its first usage's
    month."""
    last_end = Invoice.objects.filter(organization=organization).aggregate(end=Max("period_end"))
    if last_end["end"]:
        return last_end["end"]
    first = (
        Meter.objects.filter(organization=organization).order_by("started_at").first()
        or UsageRecord.objects.filter(organization=organization).order_by("started_at").first()
    )
    return metering.month_start(first.started_at) if first else None


@transaction.atomic(durable=True)
def issue_invoice(*, organization: Organization, period_end: datetime, actor=None) -> Invoice:
    """Meter up to `period_end`, then invoice every record not yet invoiced that ended by it."""
    lock(Organization, organization.pk)
    start = next_period_start(organization)
    if start is None or period_end <= start:
        raise NothingToInvoice(_("There is no usage to invoice since the last invoice."))
    metering.meter_organization(organization.pk, until=period_end)
    records = UsageRecord.objects.filter(
        organization=organization, invoice__isnull=True, ended_at__lte=period_end
    )
    if not records.exists():
        raise NothingToInvoice(_("Nothing was used since the last invoice."))
    rate = Decimal(settings.LOAM_INVOICE_TAX_RATE)
    # What the wallet was charged for these records: the invoice's total, tax included.
    total = records.aggregate(total=Sum("amount_minor"))["total"] or 0
    tax = included_tax(total, rate)
    wallet = Wallet.objects.filter(organization=organization).first()
    paid = wallet is None or wallet.mode == BillingMode.PREPAID or wallet.balance_minor >= 0
    now = timezone.now()
    invoice = Invoice.objects.create(
        organization=organization,
        number=_number(organization, start),
        period_start=start,
        period_end=period_end,
        currency=organization.park.currency,
        subtotal_minor=total - tax,
        tax_rate=rate,
        tax_minor=tax,
        total_minor=total,
        state=InvoiceState.PAID if paid else InvoiceState.ISSUED,
        issued_at=now,
    )
    InvoiceLine.objects.bulk_create(_lines(invoice, records))
    records.update(invoice=invoice)
    record_event(
        action="invoice.issued",
        actor=actor,
        target=invoice,
        organization=organization,
        data={"number": invoice.number, "total_minor": invoice.total_minor},
    )
    emit_event(
        organization=organization,
        event_type="invoice.issued",
        data={
            "invoice": invoice.pk,
            "number": invoice.number,
            "period_start": invoice.period_start,
            "period_end": invoice.period_end,
            "currency": invoice.currency,
            "subtotal_minor": invoice.subtotal_minor,
            "tax_minor": invoice.tax_minor,
            "total_minor": invoice.total_minor,
            "state": invoice.state,
        },
    )
    return invoice


def _number(organization: Organization, period_start: datetime) -> str:
    """INV-<month it covers>-<organization>-<sequence>."""
    sequence = Invoice.objects.filter(organization=organization).count() + 1
    month = timezone.localtime(period_start).strftime("%Y%m")
    return f"INV-{month}-{organization.pk:06d}-{sequence:03d}"


def _lines(invoice: Invoice, records) -> list[InvoiceLine]:
    """A line per host or task, kind, size and rate (selectors.invoice_items sums them per
    flavor for the invoice's page)."""
    grouped = (
        records.values(
            "kind",
            "workload",
            "workload__kind",
            "workload__instance__name",
            "workload__task__name",
            "workload__image__image__name",  # a saved image's storage (agents.SavedImage)
            "workload__billed_volume__name",  # a cloud disk's (storage.Volume)
            "meter__quantity",
            "hourly_minor",
        )
        .annotate(
            seconds=Sum("seconds"),
            units=Sum("compute_unit_milliseconds"),
            amount=Sum("amount_minor"),
            n=Count("id"),
        )
        .order_by("workload__kind", "workload", "kind", "meter__quantity", "hourly_minor")
    )
    return [
        InvoiceLine(
            invoice=invoice,
            # A host's, a task's, a saved image's or a cloud disk's name; what has none
            # (shared file storage) by its kind.
            description=row["workload__instance__name"]
            or row["workload__task__name"]
            or row["workload__image__image__name"]
            or row["workload__billed_volume__name"]
            or str(WorkloadKind(row["workload__kind"]).label),
            kind=row["kind"],
            workload_id=row["workload"],
            seconds=row["seconds"],
            quantity=row["meter__quantity"],
            compute_unit_milliseconds=row["units"],
            hourly_minor=row["hourly_minor"],
            amount_minor=row["amount"],
        )
        for row in grouped
    ]


def issue_on_demand(*, organization: Organization, operator) -> Invoice:
    """An operator closes the organization's account up to now (e.g. before it leaves)."""
    require_operator(
        operator, organization.park, _("Only this park's operators may issue invoices.")
    )
    return issue_invoice(organization=organization, period_end=timezone.now(), actor=operator)


def issue_due_invoices(*, now: datetime) -> list[Invoice]:
    """Month end: invoice every organization with usage before this month that has none yet."""
    boundary = metering.month_start(now)
    metered_before = Q(meters__started_at__lt=boundary) & (
        Q(meters__ended_at__isnull=True) | Q(meters__metered_until__lt=boundary)
    )
    unbilled = Q(usage_records__invoice__isnull=True, usage_records__started_at__lt=boundary)
    candidates = Organization.objects.filter(metered_before | unbilled).distinct()
    issued = []
    for organization in candidates:
        start = next_period_start(organization)
        if start is None or start >= boundary:
            continue
        try:
            issued.append(issue_invoice(organization=organization, period_end=boundary))
        except NothingToInvoice:
            continue
    return issued


def settle_invoices(wallet: Wallet) -> None:
    """A postpaid wallet back out of debt has paid its outstanding invoices."""
    if wallet.balance_minor < 0:
        return
    outstanding = Invoice.objects.filter(
        organization_id=wallet.organization_id, state=InvoiceState.ISSUED
    )
    for invoice in outstanding:
        transition(invoice, InvoiceState.PAID, table=INVOICE_TRANSITIONS)
