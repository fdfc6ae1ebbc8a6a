"""Paying the way Chinese enterprises pay: top-ups by bank transfer (对公转账) and VAT invoices
(发票) over what was paid in.

A bank transfer is announced by the tenant with a reference code for the transfer's remark
(附言); the wallet is credited only when one of the park's operators sees the money arrive and
confirms it, under the transfer's and the wallet's row locks, so a transfer credits once. VAT
invoices are issued outside the portal by the park's finance team; the portal takes the
request, checks it against what the organization paid in, and records the number. Each is
decided once, through `transition()` and its table (BANK_TRANSFER_TRANSITIONS,
VAT_INVOICE_TRANSITIONS).
"""

import secrets

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import (
    BANK_TRANSFER_TRANSITIONS,
    VAT_INVOICE_HOLDING_STATES,
    VAT_INVOICE_TRANSITIONS,
    BankTransfer,
    BankTransferState,
    EntryKind,
    Payment,
    PaymentState,
    UsageRecord,
    VatInvoiceKind,
    VatInvoiceRequest,
    VatInvoiceState,
)
from apps.billing.services import credit, locked_wallet, wallet_of
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.money import MINOR_PER_MAJOR, format_money
from apps.core.transitions import transition
from apps.tenants import credit_code
from apps.tenants.access import authorize, require_operator
from apps.tenants.roles import Action

# Typed by hand into a bank's remark field: no 0/O or 1/I to confuse.
REFERENCE_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"
REFERENCE_PREFIX, REFERENCE_LENGTH = "LM", 8
MIN_TRANSFER_MAJOR, MAX_TRANSFER_MAJOR = 100, 100_000_000


class AlreadyDecided(DomainError):
    code = "already_decided"
    status = 409


def new_reference() -> str:
    return REFERENCE_PREFIX + "".join(
        secrets.choice(REFERENCE_ALPHABET) for _ in range(REFERENCE_LENGTH)
    )


# Each kind's audit actions ("bank_transfer.credited") and its table of moves.
_DECISIONS = {
    BankTransfer: ("bank_transfer", BANK_TRANSFER_TRANSITIONS),
    VatInvoiceRequest: ("vat_invoice", VAT_INVOICE_TRANSITIONS),
}


def _decide(subject, state: str, *, actor, by=None, audit_data=None, **fields):
    """Move a transfer or invoice request, read under its row lock, to its final `state`, with
    who decided (None: the tenant withdrew it), when, and what the decision records."""
    prefix, table = _DECISIONS[type(subject)]
    return transition(
        subject,
        state,
        table=table,
        actor=actor,
        held=True,
        action=f"{prefix}.{state}",
        changes={"decided_by": by, "decided_at": timezone.now(), **fields},
        audit_data=audit_data,
    )


# --- Bank transfers --------------------------------------------------------------------------


@transaction.atomic(durable=True)
def announce_bank_transfer(*, organization, actor, amount_minor: int) -> BankTransfer:
    """The tenant says it will transfer `amount_minor`: a transfer awaiting the money, with the
    reference code its remark must carry."""
    authorize(actor, organization, Action.MANAGE_BILLING)
    wallet = wallet_of(organization)
    per_major = MINOR_PER_MAJOR[wallet.currency]
    low, high = MIN_TRANSFER_MAJOR * per_major, MAX_TRANSFER_MAJOR * per_major
    if not low <= amount_minor <= high:
        raise ValidationError(
            {
                "amount": _("Transfer between %(low)s and %(high)s.")
                % {
                    "low": format_money(low, wallet.currency),
                    "high": format_money(high, wallet.currency),
                }
            }
        )
    reference = new_reference()
    while BankTransfer.objects.filter(reference=reference).exists():
        reference = new_reference()
    transfer = BankTransfer.objects.create(
        organization=organization,
        amount_minor=amount_minor,
        currency=wallet.currency,
        reference=reference,
        requested_by=actor,
    )
    record_event(
        action="bank_transfer.announced",
        actor=actor,
        target=transfer,
        organization=organization,
        data={"reference": reference, "amount_minor": amount_minor},
    )
    return transfer


def _locked_transfer(transfer_id: int, **filters) -> BankTransfer:
    return (
        BankTransfer.objects.select_for_update(of=("self",))
        .select_related("organization__park")
        .get(pk=transfer_id, **filters)
    )


def _still_awaiting(transfer: BankTransfer) -> None:
    if transfer.state != BankTransferState.AWAITING:
        raise AlreadyDecided(
            _("Transfer %(reference)s is already %(state)s.")
            % {"reference": transfer.reference, "state": transfer.get_state_display().lower()}
        )


@transaction.atomic(durable=True)
def cancel_bank_transfer(*, transfer_id: int, organization, actor) -> BankTransfer:
    """The tenant will not transfer after all (while nothing was credited)."""
    authorize(actor, organization, Action.MANAGE_BILLING)
    transfer = _locked_transfer(transfer_id, organization=organization)
    _still_awaiting(transfer)
    return _decide(transfer, BankTransferState.CANCELLED, actor=actor)


@transaction.atomic(durable=True)
def credit_bank_transfer(*, transfer_id: int, operator, received_minor: int) -> BankTransfer:
    """The money arrived: credit the wallet with what was received, once."""
    transfer = _locked_transfer(transfer_id)
    require_operator(operator, transfer.organization.park)
    _still_awaiting(transfer)
    if received_minor <= 0:
        raise ValidationError({"received": _("Enter the amount received, above zero.")})
    wallet = locked_wallet(transfer.organization_id)
    credit(
        wallet,
        amount_minor=received_minor,
        kind=EntryKind.TOP_UP,
        description=_("Bank transfer %(reference)s") % {"reference": transfer.reference},
    )
    return _decide(
        transfer,
        BankTransferState.CREDITED,
        actor=operator,
        by=operator,
        received_minor=received_minor,
        audit_data={"reference": transfer.reference, "received_minor": received_minor},
    )


@transaction.atomic(durable=True)
def reject_bank_transfer(*, transfer_id: int, operator, reason: str) -> BankTransfer:
    """No such money arrived (or it cannot be matched): nothing is credited."""
    transfer = _locked_transfer(transfer_id)
    require_operator(operator, transfer.organization.park)
    _still_awaiting(transfer)
    if not reason.strip():
        raise ValidationError({"reason": _("Say why the transfer is rejected.")})
    note = reason.strip()[:200]
    return _decide(
        transfer,
        BankTransferState.REJECTED,
        actor=operator,
        by=operator,
        note=note,
        audit_data={"reference": transfer.reference, "reason": note},
    )


# --- VAT invoices ----------------------------------------------------------------------------


def paid_in_minor(organization) -> int:
    """What the organization paid in: Stripe top-ups that succeeded and bank transfers credited."""
    online = Payment.objects.filter(
        wallet__organization=organization, state=PaymentState.SUCCEEDED
    ).aggregate(total=Sum("amount_minor"))["total"]
    transfers = BankTransfer.objects.filter(
        organization=organization, state=BankTransferState.CREDITED
    ).aggregate(total=Sum("received_minor"))["total"]
    return (online or 0) + (transfers or 0)


def vat_invoiced_minor(organization) -> int:
    """What VAT invoices cover already: the requests pending and those issued."""
    invoiced = VatInvoiceRequest.objects.filter(
        organization=organization, state__in=VAT_INVOICE_HOLDING_STATES
    ).aggregate(total=Sum("amount_minor"))["total"]
    return invoiced or 0


def invoiceable_minor(organization) -> int:
    """What may still be invoiced: paid in, less what is requested or issued already."""
    return max(0, paid_in_minor(organization) - vat_invoiced_minor(organization))


def used_not_invoiced_minor(organization) -> int:
    """What the organization used (its metered usage, tax included) that no VAT invoice covers
    yet, within what may be invoiced: a request's suggested amount. Money paid in and not yet
    used is left out, as a prepayment is usually invoiced once it is spent."""
    used = UsageRecord.objects.filter(organization=organization).aggregate(
        total=Sum("amount_minor")
    )["total"]
    invoiced = vat_invoiced_minor(organization)
    return max(0, min((used or 0) - invoiced, paid_in_minor(organization) - invoiced))


@transaction.atomic(durable=True)
def request_vat_invoice(
    *,
    organization,
    actor,
    kind: str,
    amount_minor: int,
    title: str,
    taxpayer_id: str,
    email: str,
    address_phone: str = "",
    bank_account: str = "",
) -> VatInvoiceRequest:
    """A request for a VAT invoice over money paid in; a special invoice (专票) also needs the
    company's registered address and phone and its bank account."""
    authorize(actor, organization, Action.MANAGE_BILLING)
    wallet = locked_wallet(organization.pk)  # one request at a time counts what is left
    errors = {}
    taxpayer_id = credit_code.normalize(taxpayer_id)
    try:  # a company's taxpayer ID is its unified social credit code
        credit_code.validate_credit_code(taxpayer_id)
    except ValidationError as exc:
        errors["taxpayer_id"] = exc.messages
    if kind not in VatInvoiceKind.values:
        errors["kind"] = _("Choose a general or a special VAT invoice.")
    if not title.strip():
        errors["title"] = _("Enter the invoice title: the company's registered name.")
    if kind == VatInvoiceKind.SPECIAL:
        if not address_phone.strip():
            errors["address_phone"] = _("A special VAT invoice needs the registered address.")
        if not bank_account.strip():
            errors["bank_account"] = _("A special VAT invoice needs the bank and account.")
    left = invoiceable_minor(organization)
    if amount_minor <= 0 or amount_minor > left:
        errors["amount"] = _(
            "Enter an amount above zero and at most %(left)s (paid in, not yet invoiced)."
        ) % {"left": format_money(left, wallet.currency)}
    if errors:
        raise ValidationError(errors)
    invoice = VatInvoiceRequest.objects.create(
        organization=organization,
        kind=kind,
        amount_minor=amount_minor,
        currency=wallet.currency,
        title=title.strip(),
        taxpayer_id=taxpayer_id,
        address_phone=address_phone.strip(),
        bank_account=bank_account.strip(),
        email=email,
        requested_by=actor,
    )
    record_event(
        action="vat_invoice.requested",
        actor=actor,
        target=invoice,
        organization=organization,
        data={"kind": kind, "amount_minor": amount_minor},
    )
    return invoice


def _locked_invoice(request_id: int, **filters) -> VatInvoiceRequest:
    invoice = (
        VatInvoiceRequest.objects.select_for_update(of=("self",))
        .select_related("organization__park")
        .get(pk=request_id, **filters)
    )
    if invoice.state != VatInvoiceState.REQUESTED:
        raise AlreadyDecided(
            _("This invoice request is already %(state)s.")
            % {"state": invoice.get_state_display().lower()}
        )
    return invoice


@transaction.atomic(durable=True)
def cancel_vat_invoice(*, request_id: int, organization, actor) -> VatInvoiceRequest:
    authorize(actor, organization, Action.MANAGE_BILLING)
    invoice = _locked_invoice(request_id, organization=organization)
    return _decide(invoice, VatInvoiceState.CANCELLED, actor=actor)


@transaction.atomic(durable=True)
def issue_vat_invoice(*, request_id: int, operator, number: str) -> VatInvoiceRequest:
    """The finance team issued it: its number is recorded for the tenant."""
    invoice = _locked_invoice(request_id)
    require_operator(operator, invoice.organization.park)
    if not number.strip():
        raise ValidationError({"number": _("Enter the invoice number.")})
    number = number.strip()[:40]
    return _decide(
        invoice,
        VatInvoiceState.ISSUED,
        actor=operator,
        by=operator,
        number=number,
        audit_data={"number": number},
    )


@transaction.atomic(durable=True)
def reject_vat_invoice(*, request_id: int, operator, reason: str) -> VatInvoiceRequest:
    invoice = _locked_invoice(request_id)
    require_operator(operator, invoice.organization.park)
    if not reason.strip():
        raise ValidationError({"reason": _("Say why the request is rejected.")})
    note = reason.strip()[:200]
    return _decide(
        invoice,
        VatInvoiceState.REJECTED,
        actor=operator,
        by=operator,
        note=note,
        audit_data={"reason": note},
    )
