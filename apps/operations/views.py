from decimal import Decimal

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.core.web import refusals
from apps.operations.forms import AuditFilterForm
from apps.operations.selectors import audit_events, pool_capacity
from apps.orders import services as order_services
from apps.orders.forms import ApprovalPolicyForm
from apps.orders.models import ApprovalPolicy, Order, OrderState
from apps.orders.selectors import orders_awaiting_approval
from apps.tenants import services as tenant_services
from apps.tenants.decorators import operator_view
from apps.tenants.forms import MfaPolicyForm, RejectForm
from apps.tenants.models import Park, VerificationState
from apps.tenants.selectors import get_for_operator, organizations_for_operator, parks_operated_by
from apps.tenants.views import licence_response


@operator_view
def overview(request):
    parks = parks_operated_by(request.user)
    pools = list(pool_capacity(parks))
    totals = {
        "total": sum(p.total for p in pools),
        "allocated": sum(p.allocated for p in pools),
    }
    totals["free"] = totals["total"] - totals["allocated"]
    awaiting = organizations_for_operator(request.user).filter(
        verification_state=VerificationState.SUBMITTED
    )
    context = {"parks": parks, "pools": pools, "totals": totals, "awaiting": awaiting.count()}
    return render(request, "operations/overview.html", context)


@operator_view
def verification_queue(request):
    organizations = (
        organizations_for_operator(request.user)
        .filter(verification_state=VerificationState.SUBMITTED)
        .order_by("verification_submitted_at")
    )
    return render(request, "operations/verification_queue.html", {"organizations": organizations})


@operator_view
def organization_detail(request, organization_id):
    organization = get_for_operator(
        organizations_for_operator(request.user), request.user, pk=organization_id
    )
    reject_form = RejectForm(request.POST or None)
    if request.method == "POST":
        decision = request.POST.get("decision")
        if decision == "approve":
            with refusals(request) as outcome:
                tenant_services.approve_verification(
                    organization=organization, operator=request.user
                )
            if not outcome.refused:
                messages.success(request, _("%(name)s is verified.") % {"name": organization})
                return redirect("operations:verification_queue")
        elif decision == "reject" and reject_form.is_valid():
            with refusals(request, reject_form) as outcome:
                tenant_services.reject_verification(
                    organization=organization,
                    operator=request.user,
                    reason=reject_form.cleaned_data["reason"],
                )
            if not outcome.refused:
                messages.success(request, _("Verification rejected; the organization is told why."))
                return redirect("operations:verification_queue")
    context = {
        "organization": organization,
        "memberships": organization.memberships.select_related("user"),
        "reject_form": reject_form,
        "events": audit_events([organization.park], organization=organization)[:20],
    }
    status = 422 if reject_form.errors else 200
    return render(request, "operations/organization_detail.html", context, status=status)


@operator_view
def organization_licence(request, organization_id):
    organization = get_for_operator(
        organizations_for_operator(request.user), request.user, pk=organization_id
    )
    return licence_response(organization)


@operator_view
def audit_log(request):
    parks = parks_operated_by(request.user)
    form = AuditFilterForm(
        request.GET or None, organizations=organizations_for_operator(request.user)
    )
    form.is_valid()  # an invalid filter is shown as an error; the valid ones still apply
    filters = getattr(form, "cleaned_data", {})
    events = audit_events(parks, **{k: v for k, v in filters.items() if v})
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    template = (
        "operations/partials/_audit_rows.html" if request.htmx else "operations/audit_log.html"
    )
    return render(request, template, context)


@operator_view
def park_security(request, park_id):
    park = get_for_operator(Park.objects.all(), request.user, park_field="pk", pk=park_id)
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
def order_approvals(request):
    orders = orders_awaiting_approval(parks_operated_by(request.user))
    return render(
        request, "operations/order_approvals.html", {"orders": orders, "form": RejectForm()}
    )


@operator_view
@require_POST
def order_decision(request, order_id):
    order = get_for_operator(
        Order.objects.select_related("organization__park", "instance"),
        request.user,
        park_field="organization__park",
        pk=order_id,
    )
    decision = request.POST.get("decision")
    with refusals(request) as outcome:
        if decision == "approve":
            order = order_services.approve_order(order=order, operator=request.user)
        elif decision == "reject":
            order = order_services.reject_order(
                order=order, operator=request.user, reason=request.POST.get("reason", "")
            )
        else:
            raise Http404
    if not outcome.refused:
        if order.state == OrderState.FAILED:
            messages.warning(request, order.reason)
        else:
            messages.success(
                request,
                _("Order #%(pk)s: %(state)s.")
                % {"pk": order.pk, "state": order.get_state_display()},
            )
    return redirect("operations:order_approvals")


@operator_view
def approval_policy(request, park_id):
    park = get_for_operator(Park.objects.all(), request.user, park_field="pk", pk=park_id)
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
