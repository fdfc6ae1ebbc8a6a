from decimal import Decimal

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.core.web import refusals
from apps.operations.forms import AuditFilterForm
from apps.operations.selectors import audit_events
from apps.operations.views._common import page_of, parks_of
from apps.orders import services as order_services
from apps.orders.forms import ApprovalPolicyForm
from apps.orders.models import ApprovalPolicy
from apps.tenants import services as tenant_services
from apps.tenants.decorators import operator_view
from apps.tenants.forms import MfaPolicyForm
from apps.tenants.selectors import operated_park, organizations_for_operator


@operator_view
def audit_log(request):
    form = AuditFilterForm(
        request.GET or None, organizations=organizations_for_operator(request.user)
    )
    form.is_valid()  # an invalid filter is shown as an error; the valid ones still apply
    filters = getattr(form, "cleaned_data", {})
    events = audit_events(parks_of(request), **{k: v for k, v in filters.items() if v})
    page, query = page_of(request, events)
    context = {"form": form, "page": page, "query": query}
    template = (
        "operations/partials/_audit_rows.html" if request.htmx else "operations/audit_log.html"
    )
    return render(request, template, context)


@operator_view
def park_security(request, park_id):
    park = operated_park(request.user, park_id)
    form = MfaPolicyForm(
        request.POST or None,
        initial={
            "require_mfa_for_operators": park.require_mfa_for_operators,
            "require_mfa_for_owners": park.require_mfa_for_owners,
        },
    )
    if request.method == "POST" and form.is_valid():
        with refusals(request, form) as outcome:
            tenant_services.set_mfa_policy(
                park=park,
                operator=request.user,
                for_operators=form.cleaned_data["require_mfa_for_operators"],
                for_owners=form.cleaned_data["require_mfa_for_owners"],
            )
        if not outcome.refused:
            messages.success(request, _("Security policy saved."))
            return redirect("operations:park_security", park_id=park.pk)
    return render(request, "operations/park_security.html", {"park": park, "form": form})


@operator_view
def approval_policy(request, park_id):
    park = operated_park(request.user, park_id)
    policy = ApprovalPolicy.objects.filter(park=park).first() or ApprovalPolicy(park=park)
    form = ApprovalPolicyForm(
        request.POST or None,
        initial={
            "unverified_needs_approval": policy.unverified_needs_approval,
            "max_accelerators": policy.max_accelerators,
            "max_hourly_price": (
                Decimal(policy.max_hourly_minor) / 100
                if policy.max_hourly_minor is not None
                else None
            ),
        },
    )
    if request.method == "POST" and form.is_valid():
        price = form.cleaned_data["max_hourly_price"]
        with refusals(request, form) as outcome:
            order_services.set_approval_policy(
                park=park,
                operator=request.user,
                unverified_needs_approval=form.cleaned_data["unverified_needs_approval"],
                max_accelerators=form.cleaned_data["max_accelerators"],
                max_hourly_minor=int(price * 100) if price is not None else None,
            )
        if not outcome.refused:
            messages.success(request, _("Approval policy saved."))
            return redirect("operations:approval_policy", park_id=park.pk)
    return render(request, "operations/approval_policy.html", {"park": park, "form": form})
