"""Pages for bank transfers (对公转账) and VAT invoices (发票): the tenant announces a transfer or
requests an invoice; the park's operators credit, issue or reject (apps.billing.transfers)."""

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.billing import transfers
from apps.billing.forms import (
    BankTransferForm,
    InvoiceNumberForm,
    ReasonForm,
    ReceivedForm,
    VatInvoiceForm,
    to_minor,
)
from apps.billing.models import (
    BankTransfer,
    BankTransferState,
    VatInvoiceRequest,
    VatInvoiceState,
)
from apps.billing.services import wallet_of
from apps.core.money import format_money, to_major
from apps.core.numbers import parse_id
from apps.core.web import refusals
from apps.tenants.decorators import operator_view, organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import parks_operated_by

RECENT_SHOWN = 20


def _posted_id(request, model=None, **owned_by) -> int:
    """The id the form posted, of a `model` row matching `owned_by` where given; else 404."""
    value = parse_id(request.POST.get("id", ""))
    if value is None or (model and not model.objects.filter(pk=value, **owned_by).exists()):
        raise Http404
    return value


# --- The tenant ------------------------------------------------------------------------------


@organization_view(Action.VIEW_BILLING)
def bank_transfers(request):
    organization = request.organization
    wallet = wallet_of(organization)
    may_manage = can(request.membership.role, Action.MANAGE_BILLING)
    form = BankTransferForm(request.POST if request.POST.get("action") == "announce" else None)
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied
        action = request.POST.get("action")
        if action == "announce" and form.is_valid():
            with refusals(request, form) as outcome:
                transfer = transfers.announce_bank_transfer(
                    organization=organization,
                    actor=request.user,
                    amount_minor=to_minor(form.cleaned_data["amount"], wallet.currency),
                )
            if not outcome.refused:
                messages.success(
                    request,
                    _("Transfer announced: write %(reference)s in the transfer's remark.")
                    % {"reference": transfer.reference},
                )
                return redirect("billing:bank_transfers")
        elif action == "cancel":
            with refusals(request) as outcome:
                transfers.cancel_bank_transfer(
                    transfer_id=_posted_id(request, BankTransfer, organization=organization),
                    organization=organization,
                    actor=request.user,
                )
            if not outcome.refused:
                messages.success(request, _("Transfer cancelled."))
            return redirect("billing:bank_transfers")
        elif action != "announce":
            raise Http404
    context = {
        "wallet": wallet,
        "form": form,
        "may_manage": may_manage,
        "account": settings.LOAM_BANK_TRANSFER_ACCOUNT,
        "transfers": BankTransfer.objects.filter(organization=organization)[:50],
    }
    status = 422 if form.errors else 200
    return render(request, "billing/bank_transfers.html", context, status=status)


@organization_view(Action.VIEW_BILLING)
def vat_invoices(request):
    organization = request.organization
    wallet = wallet_of(organization)
    may_manage = can(request.membership.role, Action.MANAGE_BILLING)
    left = transfers.invoiceable_minor(organization)
    used = transfers.used_not_invoiced_minor(organization)
    form = VatInvoiceForm(
        request.POST if request.POST.get("action") == "request" else None,
        initial={  # a verified enterprise's registered name and code
            "title": organization.legal_name or organization.name,
            "taxpayer_id": organization.credit_code,
            "email": request.user.email,
            "amount": to_major(used, wallet.currency) if used else None,
        },
        used_not_invoiced=format_money(used, wallet.currency),
        invoiceable=format_money(left, wallet.currency),
    )
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied
        action = request.POST.get("action")
        if action == "request" and form.is_valid():
            data = form.cleaned_data
            with refusals(request, form) as outcome:
                transfers.request_vat_invoice(
                    organization=organization,
                    actor=request.user,
                    kind=data["kind"],
                    amount_minor=to_minor(data["amount"], wallet.currency),
                    title=data["title"],
                    taxpayer_id=data["taxpayer_id"],
                    email=data["email"],
                    address_phone=data["address_phone"],
                    bank_account=data["bank_account"],
                )
            if not outcome.refused:
                messages.success(request, _("Invoice requested; it is sent to the email given."))
                return redirect("billing:vat_invoices")
        elif action == "cancel":
            with refusals(request) as outcome:
                transfers.cancel_vat_invoice(
                    request_id=_posted_id(request, VatInvoiceRequest, organization=organization),
                    organization=organization,
                    actor=request.user,
                )
            if not outcome.refused:
                messages.success(request, _("Invoice request cancelled."))
            return redirect("billing:vat_invoices")
        elif action != "request":
            raise Http404
    context = {
        "wallet": wallet,
        "form": form,
        "may_manage": may_manage,
        "invoiceable_minor": left,
        "requests": VatInvoiceRequest.objects.filter(organization=organization)[:50],
    }
    return render(request, "billing/vat_invoices.html", context, status=422 if form.errors else 200)


# --- The park's operators --------------------------------------------------------------------

OPERATOR_ACTIONS = {
    "credit": (ReceivedForm, _("Transfer %(ref)s credited.")),
    "reject_transfer": (ReasonForm, _("Transfer %(ref)s rejected.")),
    "issue": (InvoiceNumberForm, _("Invoice %(ref)s recorded as issued.")),
    "reject_invoice": (ReasonForm, _("Invoice request %(ref)s rejected.")),
}


@operator_view
def receivables(request):
    """What waits for the park's finance team: transfers to match and invoices to issue."""
    parks = list(parks_operated_by(request.user).order_by("name"))
    if not parks:
        raise Http404
    park = next((p for p in parks if str(p.pk) == request.GET.get("park")), parks[0])
    if request.method == "POST":
        return _decide(request, park)
    in_park = {"organization__park": park}
    context = {
        "parks": parks,
        "park": park,
        "awaiting": BankTransfer.objects.filter(state=BankTransferState.AWAITING, **in_park)
        .select_related("organization", "requested_by")
        .order_by("created_at"),
        "requested": VatInvoiceRequest.objects.filter(state=VatInvoiceState.REQUESTED, **in_park)
        .select_related("organization", "requested_by")
        .order_by("created_at"),
        "decided_transfers": BankTransfer.objects.filter(**in_park)
        .exclude(state=BankTransferState.AWAITING)
        .select_related("organization", "decided_by")[:RECENT_SHOWN],
        "decided_invoices": VatInvoiceRequest.objects.filter(**in_park)
        .exclude(state=VatInvoiceState.REQUESTED)
        .select_related("organization", "decided_by")[:RECENT_SHOWN],
    }
    return render(request, "billing/receivables.html", context)


def _decide(request, park):
    action = request.POST.get("action")
    if action not in OPERATOR_ACTIONS:
        raise Http404
    form_class, done = OPERATOR_ACTIONS[action]
    form = form_class(request.POST)
    model = BankTransfer if action in ("credit", "reject_transfer") else VatInvoiceRequest
    object_id = _posted_id(request, model, organization__park=park)
    subject = model.objects.get(pk=object_id)
    back = redirect(f"{request.path}?park={park.pk}")
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return back
    data = form.cleaned_data
    with refusals(request) as outcome:
        if action == "credit":
            transfers.credit_bank_transfer(
                transfer_id=object_id,
                operator=request.user,
                received_minor=to_minor(data["received"], subject.currency),
            )
        elif action == "reject_transfer":
            transfers.reject_bank_transfer(
                transfer_id=object_id, operator=request.user, reason=data["reason"]
            )
        elif action == "issue":
            transfers.issue_vat_invoice(
                request_id=object_id, operator=request.user, number=data["number"]
            )
        else:
            transfers.reject_vat_invoice(
                request_id=object_id, operator=request.user, reason=data["reason"]
            )
    if not outcome.refused:
        reference = subject.reference if model is BankTransfer else data.get("number", subject.pk)
        messages.success(request, done % {"ref": reference})
    return back
