from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from apps.core.money import Currency, format_money
from apps.tenants.models import Organization
from apps.workloads.models import Workload


class BillingMode(models.TextChoices):
    PREPAID = "prepaid", _("Prepaid")
    POSTPAID = "postpaid", _("Postpaid (credit)")


class Wallet(models.Model):
    """An organization's balance. `held_minor` is reserved for orders' first hour; what can still
    be spent is balance - held + credit limit. New orders are refused beyond it, but metering
    charges what already ran even past it (that is owed), and stops the hosts there."""

    organization = models.OneToOneField(
        Organization,
        on_delete=models.PROTECT,
        related_name="wallet",
        verbose_name=_("organization"),
    )
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    mode = models.CharField(
        _("billing mode"), max_length=16, choices=BillingMode.choices, default=BillingMode.PREPAID
    )
    balance_minor = models.BigIntegerField(_("balance (minor units)"), default=0)
    held_minor = models.BigIntegerField(_("held (minor units)"), default=0)
    credit_limit_minor = models.BigIntegerField(_("credit limit (minor units)"), default=0)
    low_balance_warned_at = models.DateTimeField(_("low balance warned at"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("wallet")
        verbose_name_plural = _("wallets")
        constraints = [
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="wallet_currency_known"
            ),
            models.CheckConstraint(
                condition=Q(mode__in=BillingMode.values), name="wallet_mode_known"
            ),
            models.CheckConstraint(condition=Q(held_minor__gte=0), name="wallet_held_not_negative"),
            models.CheckConstraint(
                condition=Q(credit_limit_minor__gte=0), name="wallet_credit_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(mode=BillingMode.POSTPAID) | Q(credit_limit_minor=0),
                name="wallet_credit_only_postpaid",
            ),
        ]

    def __str__(self):
        return f"{self.organization} ({self.currency})"

    @property
    def available_minor(self):
        return self.balance_minor - self.held_minor + self.credit_limit_minor


class EntryKind(models.TextChoices):
    TOP_UP = "top_up", _("Top-up")
    CHARGE = "charge", _("Usage charge")
    REFUND = "refund", _("Refund")
    ADJUSTMENT = "adjustment", _("Adjustment")


class LedgerEntry(models.Model):
    """Every change to a wallet's balance, append-only; the balance is their running sum."""

    wallet = models.ForeignKey(
        Wallet, on_delete=models.PROTECT, related_name="entries", verbose_name=_("wallet")
    )
    kind = models.CharField(_("kind"), max_length=16, choices=EntryKind.choices)
    amount_minor = models.BigIntegerField(_("amount (minor units)"))
    balance_after_minor = models.BigIntegerField(_("balance after (minor units)"))
    description = models.CharField(_("description"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("ledger entry")
        verbose_name_plural = _("ledger entries")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=EntryKind.values), name="ledger_kind_known"
            ),
            models.CheckConstraint(condition=~Q(amount_minor=0), name="ledger_amount_not_zero"),
            models.CheckConstraint(
                condition=(Q(kind__in=[EntryKind.TOP_UP, EntryKind.REFUND]) & Q(amount_minor__gt=0))
                | (Q(kind=EntryKind.CHARGE) & Q(amount_minor__lt=0))
                | Q(kind=EntryKind.ADJUSTMENT),
                name="ledger_sign_matches_kind",
            ),
        ]
        indexes = [models.Index(fields=["wallet", "-created_at"])]

    def __str__(self):
        return f"{self.get_kind_display()} {self.amount_minor}"


class PaymentState(models.TextChoices):
    PENDING = "pending", pgettext_lazy("payment", "Pending")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


_P = PaymentState
PAYMENT_TRANSITIONS = {
    # A session paid after it expired or failed still brought the money: it is credited.
    _P.PENDING: frozenset({_P.SUCCEEDED, _P.FAILED, _P.CANCELLED}),
    _P.FAILED: frozenset({_P.SUCCEEDED}),
    _P.CANCELLED: frozenset({_P.SUCCEEDED}),
    _P.SUCCEEDED: frozenset(),
}


class Payment(models.Model):
    """A top-up through Stripe Checkout."""

    wallet = models.ForeignKey(
        Wallet, on_delete=models.PROTECT, related_name="payments", verbose_name=_("wallet")
    )
    amount_minor = models.BigIntegerField(_("amount (minor units)"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    state = models.CharField(
        _("state"), max_length=16, choices=PaymentState.choices, default=PaymentState.PENDING
    )
    stripe_checkout_session_id = models.CharField(
        max_length=255, blank=True, verbose_name=_("Stripe Checkout session")
    )
    stripe_payment_intent_id = models.CharField(
        max_length=255, blank=True, verbose_name=_("Stripe payment intent")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    completed_at = models.DateTimeField(_("completed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("payment")
        verbose_name_plural = _("payments")
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="payment_amount_positive"),
            models.CheckConstraint(
                condition=Q(state__in=PaymentState.values), name="payment_state_known"
            ),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="payment_currency_known"
            ),
            models.UniqueConstraint(
                fields=["stripe_checkout_session_id"],
                condition=~Q(stripe_checkout_session_id=""),
                name="payment_checkout_session_unique",
            ),
        ]

    def __str__(self):
        amount = format_money(self.amount_minor, self.currency)
        return f"{self.wallet} +{amount} ({self.get_state_display()})"


class InvoiceState(models.TextChoices):
    DRAFT = "draft", _("Draft")
    # A monthly bill is issued (出账); a VAT invoice is issued (开具): one English word, two
    # Chinese ones, so each state names its own.
    ISSUED = "issued", pgettext_lazy("monthly bill state", "Issued")
    PAID = "paid", _("Paid")
    VOID = "void", _("Void")


_I = InvoiceState
INVOICE_TRANSITIONS = {
    _I.DRAFT: frozenset({_I.ISSUED, _I.PAID, _I.VOID}),
    _I.ISSUED: frozenset({_I.PAID, _I.VOID}),
    _I.PAID: frozenset(),
    _I.VOID: frozenset(),
}


class Invoice(models.Model):
    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="invoices",
        verbose_name=_("organization"),
    )
    number = models.CharField(_("number"), max_length=32, unique=True)
    period_start = models.DateTimeField(_("period start"))
    period_end = models.DateTimeField(_("period end"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    subtotal_minor = models.BigIntegerField(_("subtotal (minor units)"), default=0)
    tax_rate = models.DecimalField(_("tax rate"), max_digits=5, decimal_places=4, default=0)
    tax_minor = models.BigIntegerField(_("tax (minor units)"), default=0)
    total_minor = models.BigIntegerField(_("total (minor units)"), default=0)
    state = models.CharField(
        _("state"), max_length=16, choices=InvoiceState.choices, default=InvoiceState.DRAFT
    )
    issued_at = models.DateTimeField(_("issued at"), null=True, blank=True)

    class Meta:
        verbose_name = _("invoice")
        verbose_name_plural = _("invoices")
        ordering = ["-period_start"]
        constraints = [
            models.CheckConstraint(
                condition=Q(period_end__gt=F("period_start")), name="invoice_period_positive"
            ),
            models.CheckConstraint(
                condition=Q(total_minor=F("subtotal_minor") + F("tax_minor")),
                name="invoice_total_is_sum",
            ),
            models.CheckConstraint(
                condition=Q(subtotal_minor__gte=0) & Q(tax_minor__gte=0),
                name="invoice_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(state__in=InvoiceState.values), name="invoice_state_known"
            ),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="invoice_currency_known"
            ),
            models.UniqueConstraint(
                fields=["organization", "period_start"], name="invoice_one_per_period"
            ),
        ]

    def __str__(self):
        return self.number

    @property
    def tax_percent(self):
        return (self.tax_rate * 100).normalize()


class MeterKind(models.TextChoices):
    COMPUTE = "compute", _("Host running time")
    DISK = "disk", _("Cloud disk")
    BANDWIDTH = "bandwidth", _("Bandwidth")
    TASK = "task", _("Training task running time")
    SHARED_FS = "shared_fs", _("Shared file storage")
    IMAGE = "image", _("Saved image storage")


class Meter(models.Model):
    """One priced quantity of one instance or task over an interval: a host running at a rate,
    a disk of N GB, a bandwidth of M Mbps. Any change of state, size or rate closes the meter
    and opens the next one; metering turns meters into UsageRecords up to `metered_until`."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="meters",
        verbose_name=_("organization"),
    )
    workload = models.ForeignKey(
        Workload,
        on_delete=models.PROTECT,
        related_name="meters",
        verbose_name=_("workload"),
    )
    kind = models.CharField(_("kind"), max_length=16, choices=MeterKind.choices)
    # GB of disk, Mbps of bandwidth, 1 for a host or task.
    quantity = models.PositiveIntegerField(_("quantity"))
    hourly_minor = models.DecimalField(
        _("rate per hour (minor units)"), max_digits=20, decimal_places=6
    )
    compute_units = models.DecimalField(
        _("normalized compute units"), max_digits=10, decimal_places=3, default=0
    )
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    started_at = models.DateTimeField(_("from"))
    ended_at = models.DateTimeField(_("to"), null=True, blank=True)
    # For what a backend runs and the portal learns of by asking (a Slurm job): how far the
    # backend has said it ran. An open meter is measured no further, so an end learned late (an
    # outage, a poll's delay) is never billed past; None: measured up to now.
    known_until = models.DateTimeField(_("known to run until"), null=True, blank=True)
    metered_until = models.DateTimeField(_("metered until"))
    metered_seconds = models.PositiveBigIntegerField(_("seconds metered"), default=0)
    metered_minor = models.BigIntegerField(_("amount metered (minor units)"), default=0)

    class Meta:
        verbose_name = _("meter")
        verbose_name_plural = _("meters")
        ordering = ["started_at", "pk"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=MeterKind.values), name="meter_kind_known"),
            models.CheckConstraint(
                condition=Q(hourly_minor__gte=0)
                & Q(compute_units__gte=0)
                & Q(metered_minor__gte=0),
                name="meter_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="meter_currency_known"
            ),
            models.CheckConstraint(
                condition=Q(metered_until__gte=F("started_at"))
                & (Q(ended_at__isnull=True) | Q(metered_until__lte=F("ended_at"))),
                name="meter_metered_within_interval",
            ),
            # At most one open meter of each kind per workload: a change closes the old one.
            models.UniqueConstraint(
                fields=["workload", "kind"],
                condition=Q(ended_at__isnull=True),
                name="meter_one_open_per_workload_kind",
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "ended_at"]),
            # The meters metering still owes (metering.due): few beside the closed ones'
            # history, which grows with every stop, start and resize.
            models.Index(
                fields=["organization", "metered_until"],
                condition=Q(ended_at__isnull=True) | Q(metered_until__lt=F("ended_at")),
                name="meter_due",
            ),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} × {self.quantity} ({self.workload})"


class UsageRecord(models.Model):
    """What one meter measured in a day (before 2026-12, in one metering pass), priced per
    second."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="usage_records",
        verbose_name=_("organization"),
    )
    meter = models.ForeignKey(
        Meter, on_delete=models.PROTECT, related_name="records", verbose_name=_("meter")
    )
    kind = models.CharField(_("kind"), max_length=16, choices=MeterKind.choices)
    workload = models.ForeignKey(
        Workload,
        on_delete=models.PROTECT,
        related_name="usage",
        verbose_name=_("workload"),
    )
    invoice = models.ForeignKey(
        Invoice,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usage_records",
        verbose_name=_("invoice"),
    )
    started_at = models.DateTimeField(_("from"))
    ended_at = models.DateTimeField(_("to"))
    seconds = models.PositiveIntegerField(_("seconds"))
    # Normalized compute-unit seconds, in thousandths, so reports compare chips.
    compute_unit_milliseconds = models.BigIntegerField(_("compute unit-seconds (×1000)"))
    hourly_minor = models.DecimalField(
        _("rate per hour (minor units)"), max_digits=20, decimal_places=6
    )
    amount_minor = models.BigIntegerField(_("amount (minor units)"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    # The day (the park's) whose use the record holds, which each metering pass of that day
    # extends until it is invoiced; empty on records written a pass each, before days.
    day = models.DateField(_("day"), null=True, blank=True)

    class Meta:
        verbose_name = _("usage record")
        verbose_name_plural = _("usage records")
        ordering = ["-started_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ended_at__gt=F("started_at")), name="usage_interval_positive"
            ),
            models.CheckConstraint(
                condition=Q(amount_minor__gte=0)
                & Q(hourly_minor__gte=0)
                & Q(compute_unit_milliseconds__gte=0),
                name="usage_amounts_not_negative",
            ),
            models.CheckConstraint(
                condition=Q(currency__in=Currency.values), name="usage_currency_known"
            ),
            models.CheckConstraint(condition=Q(kind__in=MeterKind.values), name="usage_kind_known"),
            # One record per meter and interval start: metering may retry, never double-bill.
            models.UniqueConstraint(
                fields=["meter", "started_at"], name="usage_meter_interval_unique"
            ),
            # The record metering folds a meter's use of a day into (metering.FOLD).
            models.UniqueConstraint(
                fields=["meter", "day"],
                condition=Q(invoice__isnull=True),
                name="usage_one_open_record_per_meter_day",
            ),
        ]
        indexes = [
            models.Index(fields=["organization", "started_at"]),
            # An organization's days of use (the billing page's chart), read from the index
            # alone: what it groups and sums is in it.
            models.Index(
                fields=["organization", "day"],
                include=["kind", "workload", "amount_minor"],
                name="usage_organization_day",
            ),
        ]

    def __str__(self):
        return f"{self.workload}: {self.seconds}s"


class MonthlySpend(models.Model):
    """What an organization was charged in a month of the park's calendar: its usage records'
    amounts, added up as metering writes them, so that the operators' revenue by month and top
    tenants read a row per organization and month instead of every record of the year (metering
    writes one per meter each pass)."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="monthly_spend",
        verbose_name=_("organization"),
    )
    month = models.DateField(_("month"))  # its first day
    amount_minor = models.BigIntegerField(_("amount (minor units)"))

    class Meta:
        verbose_name = _("monthly spend")
        verbose_name_plural = _("monthly spend")
        constraints = [
            models.UniqueConstraint(fields=["organization", "month"], name="monthly_spend_once"),
            models.CheckConstraint(
                condition=Q(amount_minor__gte=0), name="monthly_spend_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.organization_id} {self.month:%Y-%m}: {self.amount_minor}"


class Hold(models.Model):
    """The first hour's cost of an order, held on the wallet until usage has drawn it down or
    the host is gone."""

    wallet = models.ForeignKey(
        Wallet, on_delete=models.PROTECT, related_name="holds", verbose_name=_("wallet")
    )
    workload = models.OneToOneField(
        Workload, on_delete=models.PROTECT, related_name="hold", verbose_name=_("workload")
    )
    amount_minor = models.BigIntegerField(_("held (minor units)"))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("hold")
        verbose_name_plural = _("holds")
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gte=0), name="hold_not_negative"),
        ]

    def __str__(self):
        return f"{self.workload}: {self.amount_minor}"


class FundsSuspension(models.Model):
    """A host stopped because its organization ran out of money; resumed after a top-up."""

    workload = models.ForeignKey(
        Workload,
        on_delete=models.PROTECT,
        related_name="funds_suspensions",
        verbose_name=_("workload"),
    )
    suspended_at = models.DateTimeField(_("suspended at"), auto_now_add=True)
    resumed_at = models.DateTimeField(_("resumed at"), null=True, blank=True)

    class Meta:
        verbose_name = _("suspension for funds")
        verbose_name_plural = _("suspensions for funds")
        constraints = [
            models.UniqueConstraint(
                fields=["workload"],
                condition=Q(resumed_at__isnull=True),
                name="suspension_one_open_per_workload",
            ),
        ]

    def __str__(self):
        return f"{self.workload} ({self.suspended_at:%Y-%m-%d %H:%M})"


class StripeEvent(models.Model):
    """Each Stripe webhook event we processed, so a replay is recognised and ignored."""

    event_id = models.CharField(_("event"), max_length=255, unique=True)
    type = models.CharField(_("type"), max_length=80)
    received_at = models.DateTimeField(_("received at"), auto_now_add=True)

    class Meta:
        verbose_name = _("Stripe event")
        verbose_name_plural = _("Stripe events")

    def __str__(self):
        return f"{self.type} {self.event_id}"


class InvoiceLine(models.Model):
    invoice = models.ForeignKey(
        Invoice, on_delete=models.CASCADE, related_name="lines", verbose_name=_("invoice")
    )
    description = models.CharField(_("description"), max_length=200)
    kind = models.CharField(_("kind"), max_length=16, choices=MeterKind.choices)
    workload = models.ForeignKey(
        Workload,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("workload"),
    )
    seconds = models.PositiveBigIntegerField(_("seconds"))
    quantity = models.PositiveIntegerField(_("quantity"))
    compute_unit_milliseconds = models.BigIntegerField(_("compute unit-seconds (×1000)"))
    # The rate its records were priced at; empty on the lines of invoices issued before it was
    # kept (their page shows no unit price).
    hourly_minor = models.DecimalField(
        _("rate per hour (minor units)"), max_digits=20, decimal_places=6, null=True, blank=True
    )
    amount_minor = models.BigIntegerField(_("amount (minor units)"))

    class Meta:
        verbose_name = _("invoice line")
        verbose_name_plural = _("invoice lines")
        ordering = ["pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount_minor__gte=0), name="invoice_line_not_negative"
            ),
        ]

    def __str__(self):
        return self.description

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def compute_unit_hours(self) -> float:
        return self.compute_unit_milliseconds / 1000 / 3600


# --- Bank transfers (对公转账) and VAT invoice requests (发票) --------------------------------


class BankTransferState(models.TextChoices):
    AWAITING = "awaiting", _("Awaiting the transfer")
    CREDITED = "credited", _("Credited")
    REJECTED = "rejected", _("Rejected")
    CANCELLED = "cancelled", _("Cancelled")


_BT = BankTransferState
# A transfer is decided once: credited, rejected, or withdrawn by the tenant.
BANK_TRANSFER_TRANSITIONS = {
    _BT.AWAITING: frozenset({_BT.CREDITED, _BT.REJECTED, _BT.CANCELLED}),
    _BT.CREDITED: frozenset(),
    _BT.REJECTED: frozenset(),
    _BT.CANCELLED: frozenset(),
}


class BankTransfer(models.Model):
    """A top-up paid by bank transfer: the tenant announces it with the reference code that the
    transfer's remark (附言) carries; an operator who sees it arrive credits what was received."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="bank_transfers",
        verbose_name=_("organization"),
    )
    amount_minor = models.BigIntegerField(_("amount announced (minor units)"))
    received_minor = models.BigIntegerField(
        _("amount received (minor units)"), null=True, blank=True
    )
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    reference = models.CharField(_("reference code"), max_length=16, unique=True)
    state = models.CharField(
        _("state"),
        max_length=16,
        choices=BankTransferState.choices,
        default=BankTransferState.AWAITING,
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("requested by"),
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("decided by"),
    )
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)

    class Meta:
        verbose_name = _("bank transfer")
        verbose_name_plural = _("bank transfers")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount_minor__gt=0), name="bank_transfer_amount_positive"
            ),
            models.CheckConstraint(
                condition=Q(received_minor__isnull=True) | Q(received_minor__gt=0),
                name="bank_transfer_received_positive",
            ),
            models.CheckConstraint(
                condition=Q(state__in=BankTransferState.values), name="bank_transfer_state_known"
            ),
        ]

    def __str__(self):
        return f"{self.reference} {format_money(self.amount_minor, self.currency)}"


class VatInvoiceKind(models.TextChoices):
    GENERAL = "general", _("General VAT invoice")
    SPECIAL = "special", _("Special VAT invoice")


class VatInvoiceState(models.TextChoices):
    REQUESTED = "requested", _("Requested")
    ISSUED = "issued", pgettext_lazy("VAT invoice state", "Issued")
    REJECTED = "rejected", _("Rejected")
    CANCELLED = "cancelled", _("Cancelled")


_V = VatInvoiceState
# A request is decided once: issued, rejected, or withdrawn by the tenant.
VAT_INVOICE_TRANSITIONS = {
    _V.REQUESTED: frozenset({_V.ISSUED, _V.REJECTED, _V.CANCELLED}),
    _V.ISSUED: frozenset(),
    _V.REJECTED: frozenset(),
    _V.CANCELLED: frozenset(),
}

# What counts against the amount an organization may still have invoiced.
VAT_INVOICE_HOLDING_STATES = (VatInvoiceState.REQUESTED, VatInvoiceState.ISSUED)


class VatInvoiceRequest(models.Model):
    """A tenant's request for a VAT invoice (发票) over money it paid in; the park's finance team
    issues it outside the portal and records its number here."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.PROTECT,
        related_name="vat_invoice_requests",
        verbose_name=_("organization"),
    )
    kind = models.CharField(_("invoice type"), max_length=16, choices=VatInvoiceKind.choices)
    amount_minor = models.BigIntegerField(_("amount (minor units)"))
    currency = models.CharField(_("currency"), max_length=3, choices=Currency.choices)
    title = models.CharField(_("invoice title"), max_length=200)
    taxpayer_id = models.CharField(_("taxpayer ID"), max_length=18)
    address_phone = models.CharField(_("registered address and phone"), max_length=200, blank=True)
    bank_account = models.CharField(_("bank and account"), max_length=200, blank=True)
    email = models.EmailField(_("email to receive it"))
    state = models.CharField(
        _("state"),
        max_length=16,
        choices=VatInvoiceState.choices,
        default=VatInvoiceState.REQUESTED,
    )
    number = models.CharField(_("invoice number"), max_length=40, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="+",
        verbose_name=_("requested by"),
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("decided by"),
    )
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)

    class Meta:
        verbose_name = _("VAT invoice request")
        verbose_name_plural = _("VAT invoice requests")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(amount_minor__gt=0), name="vat_invoice_amount_positive"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=VatInvoiceKind.values), name="vat_invoice_kind_known"
            ),
            models.CheckConstraint(
                condition=Q(state__in=VatInvoiceState.values), name="vat_invoice_state_known"
            ),
        ]

    def __str__(self):
        return f"{self.title} {format_money(self.amount_minor, self.currency)}"
