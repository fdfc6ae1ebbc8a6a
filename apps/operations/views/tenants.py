from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.core.web import refusals
from apps.operations.forms.filters import OrganizationFilterForm
from apps.operations.forms.tenants import QuotaAddForm, QuotaChangeForm
from apps.operations.selectors import audit_events, lists
from apps.operations.views._common import outcome_of, page_of, parks_of
from apps.orders.models import INSTANCE_HOLDING_STATES
from apps.quotas.models import QuotaLimit
from apps.quotas.selectors import below_usage_warning, quota_rows
from apps.quotas.services import add_quota_limit, organization_usage, set_limit
from apps.tenants import services as tenant_services
from apps.tenants.decorators import operator_view
from apps.tenants.forms import RejectForm
from apps.tenants.models import VerificationState
from apps.tenants.selectors import get_for_operator, organizations_for_operator
from apps.tenants.views import licence_response


def _organization(request, organization_id):
    return get_for_operator(
        organizations_for_operator(request.user), request.user, pk=organization_id
    )


@operator_view
def verification_queue(request):
    organizations = (
        organizations_for_operator(request.user)
        .filter(verification_state=VerificationState.SUBMITTED)
        .order_by("verification_submitted_at", "pk")
    )
    return render(request, "operations/verification_queue.html", {"organizations": organizations})


@operator_view
def organization_list(request):
    form = OrganizationFilterForm(request.GET)
    page, query = page_of(request, lists.organizations(parks_of(request), **form.values()))
    context = {"form": form, "page": page, "query": query}
    template = (
        "operations/partials/_organization_rows.html"
        if request.htmx
        else "operations/organization_list.html"
    )
    return render(request, template, context)


@operator_view
def organization_detail(request, organization_id):
    organization = _organization(request, organization_id)
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
        elif decision not in ("approve", "reject"):
            raise Http404
    instances = (
        organization.instances.filter(state__in=INSTANCE_HOLDING_STATES)
        .select_related("flavor", "region", "node")
        .order_by("-created_at", "-pk")
    )
    context = {
        "organization": organization,
        "memberships": organization.memberships.select_related("user").order_by("role", "pk"),
        "reject_form": reject_form,
        "quotas": quota_rows(organization),
        "usage": organization_usage(organization),
        "wallet": getattr(organization, "wallet", None),
        "instances": instances[:50],
        "instance_count": instances.count(),
        "events": audit_events([organization.park], organization=organization)[:20],
    }
    status = 422 if reject_form.errors else 200
    return render(request, "operations/organization_detail.html", context, status=status)


@operator_view
def organization_licence(request, organization_id):
    return licence_response(_organization(request, organization_id))


def _warn_below_usage(request, limit: QuotaLimit) -> None:
    warning = below_usage_warning(limit)
    if warning:
        messages.warning(request, warning)


@operator_view
def organization_quotas(request, organization_id):
    """The organization's limits with what it uses, a form per limit, one to add a limit, and
    the history of changes (from the audit log)."""
    organization = _organization(request, organization_id)
    limits = QuotaLimit.objects.filter(organization=organization)
    add_form = QuotaAddForm(
        request.POST if request.POST.get("action") == "add" else None,
        currency=organization.park.currency,
    )
    status = 200
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "set":
            change = QuotaChangeForm(request.POST)
            if not change.is_valid():
                messages.error(
                    request, " ".join(e for errs in change.errors.values() for e in errs)
                )
                return redirect("operations:organization_quotas", organization_id=organization.pk)
            limit = limits.filter(pk=change.cleaned_data["limit_id"]).first()
            if limit is None:
                raise Http404
            try:
                value = change.stored_value(limit)
            except ValidationError as error:
                messages.error(request, " ".join(error.messages))
                return redirect("operations:organization_quotas", organization_id=organization.pk)
            with outcome_of() as outcome:
                limit = set_limit(limit=limit, operator=request.user, value=value)
            if outcome.refused:
                messages.error(request, outcome.error)
            else:
                messages.success(request, _("Limit saved."))
                _warn_below_usage(request, limit)
            return redirect("operations:organization_quotas", organization_id=organization.pk)
        if action != "add":
            raise Http404
        if add_form.is_valid():
            with refusals(request, add_form) as outcome:
                added = add_quota_limit(
                    organization=organization,
                    operator=request.user,
                    resource=add_form.cleaned_data["resource"],
                    accelerator_model=add_form.cleaned_data["accelerator_model"],
                    value=add_form.cleaned_data["value"],
                )
            if not outcome.refused:
                messages.success(request, _("Limit added."))
                _warn_below_usage(request, added)
                return redirect("operations:organization_quotas", organization_id=organization.pk)
        status = 422
    rows = quota_rows(organization)
    history, query = page_of(request, lists.quota_history(organization), per_page=20)
    context = {
        "organization": organization,
        "rows": rows,
        "add_form": add_form,
        "history": history,
        "query": query,
    }
    return render(request, "operations/organization_quotas.html", context, status=status)
