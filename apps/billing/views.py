from django.conf import settings
from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from apps.billing import invoicing, payments, selectors, services
from apps.billing.forms import AdjustmentForm, BillingTermsForm, TopUpForm, UsageGroupForm, to_minor
from apps.billing.metering import month_start
from apps.billing.models import (
    BankTransfer,
    BankTransferState,
    Invoice,
    VatInvoiceRequest,
    VatInvoiceState,
)
from apps.core.errors import DomainError
from apps.core.web import refusals
from apps.tenants.decorators import operator_view, organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import get_for_operator, organizations_for_operator, parks_operated_by

TOP_UP_OUTCOMES = {
    "success": gettext_lazy(
        "Thank you: the balance is credited as soon as Stripe confirms the payment."
    ),
    "cancelled": gettext_lazy("The top-up was cancelled; nothing was charged."),
}


@organization_view(Action.VIEW_BILLING)
def overview(request):
    organization = request.organization
    group_form = UsageGroupForm(request.GET)
    outcome = TOP_UP_OUTCOMES.get(request.GET.get("top_up", ""))
    if outcome:
        messages.info(request, outcome)
    wallet = services.wallet_of(organization)
    context = {
        "wallet": wallet,
        "estimate": selectors.month_estimate(organization),
        "usage": selectors.usage_series(organization, group=group_form.chosen()),
        "group_form": group_form,
        "entries": wallet.entries.all()[:20],
        "payments": wallet.payments.all()[:10],
        "bank_transfers": BankTransfer.objects.filter(organization=organization)[:5],
        "vat_invoice_requests": VatInvoiceRequest.objects.filter(organization=organization)[:5],
        "invoices": selectors.invoices_for(organization)[:12],
        "top_up_form": TopUpForm(),
        "can_top_up": can(request.membership.role, Action.MANAGE_BILLING),
        "stripe_enabled": settings.STRIPE_ENABLED,
    }
    return render(request, "billing/overview.html", context)


@require_POST
@organization_view(Action.MANAGE_BILLING)
def top_up(request):
    form = TopUpForm(request.POST)
    wallet = services.wallet_of(request.organization)
    if form.is_valid():
        back = request.build_absolute_uri(reverse("billing:overview"))
        with refusals(request, form) as outcome:
            _payment, checkout_url = payments.start_top_up(
                organization=request.organization,
                actor=request.user,
                amount_minor=to_minor(form.cleaned_data["amount"], wallet.currency),
                success_url=f"{back}?top_up=success",
                cancel_url=f"{back}?top_up=cancelled",
            )
        if not outcome.refused:
            return redirect(checkout_url)
    for errors in form.errors.values():
        messages.error(request, " ".join(errors))
    return redirect("billing:overview")


@organization_view(Action.VIEW_BILLING)
def invoice_detail(request, invoice_id):
    invoice = get_object_or_404(
        Invoice.objects.select_related("organization__park"),
        organization=request.organization,
        pk=invoice_id,
    )
    return render(request, "billing/invoice.html", _invoice_context(invoice))


def _invoice_context(invoice):
    lines = selectors.invoice_lines(invoice)
    return {"invoice": invoice, "items": selectors.invoice_items(invoice, lines), "lines": lines}


@csrf_exempt
@require_POST
def stripe_webhook(request):
    """Stripe's events: 400 for a bad signature (nothing is credited), else 200."""
    try:
        outcome = payments.handle_webhook(request.body, request.headers.get("Stripe-Signature", ""))
    except DomainError as refused:
        return JsonResponse({"error": refused.code, "detail": refused.message}, status=400)
    return JsonResponse({"received": True, "outcome": outcome})


# --- Operators -----------------------------------------------------------------------------


@operator_view
def park_billing(request):
    parks = list(parks_operated_by(request.user).order_by("name"))
    if not parks:
        raise Http404
    park = next((p for p in parks if str(p.pk) == request.GET.get("park")), parks[0])
    revenue = selectors.revenue_by_month(park)
    context = {
        "parks": parks,
        "park": park,
        "revenue": revenue,
        "revenue_chart": {
            "x": [row["month"].strftime("%Y-%m") for row in revenue],
            "series": [{"name": _("Revenue"), "data": [row["amount"] for row in revenue]}],
        },
        "outstanding": selectors.outstanding_wallets(park)[:50],
        "top_tenants": selectors.top_tenants(park, month=month_start(timezone.now()).date()),
        # What waits on the finance team; matched and issued on the receivables page.
        "awaiting_transfers": BankTransfer.objects.filter(
            organization__park=park, state=BankTransferState.AWAITING
        ).count(),
        "requested_invoices": VatInvoiceRequest.objects.filter(
            organization__park=park, state=VatInvoiceState.REQUESTED
        ).count(),
    }
    return render(request, "billing/park_billing.html", context)


@operator_view
def organization_billing(request, organization_id):
    organization = get_for_operator(
        organizations_for_operator(request.user), request.user, pk=organization_id
    )
    wallet = services.wallet_of(organization)
    terms_form = BillingTermsForm(
        request.POST if request.POST.get("action") == "terms" else None,
        initial={"mode": wallet.mode, "credit_limit": wallet.credit_limit_minor / 100},
    )
    adjust_form = AdjustmentForm(request.POST if request.POST.get("action") == "adjust" else None)
    if request.method == "POST":
        action = request.POST.get("action")
        done = None
        if action == "terms" and terms_form.is_valid():
            with refusals(request, terms_form) as outcome:
                services.set_billing_terms(
                    organization=organization,
                    operator=request.user,
                    mode=terms_form.cleaned_data["mode"],
                    credit_limit_minor=to_minor(
                        terms_form.cleaned_data["credit_limit"], wallet.currency
                    ),
                )
            done = not outcome.refused and _("Billing terms saved.")
        elif action == "adjust" and adjust_form.is_valid():
            with refusals(request, adjust_form) as outcome:
                services.adjust_balance(
                    organization=organization,
                    operator=request.user,
                    amount_minor=to_minor(adjust_form.cleaned_data["amount"], wallet.currency),
                    reason=adjust_form.cleaned_data["reason"],
                )
            done = not outcome.refused and _("Balance adjusted.")
        elif action == "invoice":
            with refusals(request) as outcome:
                invoice = invoicing.issue_on_demand(
                    organization=organization, operator=request.user
                )
            done = not outcome.refused and _("Invoice %(number)s issued.") % {
                "number": invoice.number
            }
        elif action not in ("terms", "adjust", "invoice"):
            raise Http404
        if done:
            messages.success(request, done)
            return redirect("billing:ops_organization", organization_id=organization.pk)
    context = {
        "organization": organization,
        "wallet": wallet,
        "estimate": selectors.month_estimate(organization),
        "terms_form": terms_form,
        "adjust_form": adjust_form,
        "entries": wallet.entries.all()[:20],
        "invoices": selectors.invoices_for(organization)[:12],
        "bank_transfers": BankTransfer.objects.filter(organization=organization)[:10],
        "vat_invoice_requests": VatInvoiceRequest.objects.filter(organization=organization)[:10],
    }
    status = 422 if terms_form.errors or adjust_form.errors else 200
    return render(request, "billing/organization_billing.html", context, status=status)


@operator_view
def operator_invoice(request, invoice_id):
    invoice = get_for_operator(
        Invoice.objects.select_related("organization__park"),
        request.user,
        park_field="organization__park",
        pk=invoice_id,
    )
    return render(request, "billing/invoice.html", _invoice_context(invoice))
