"""文件存储: the organization's shared file storage per region (its page, where a member who may
order creates it), and the park's file systems with their usage for its operators."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.catalog.models import Region
from apps.core.numbers import parse_id
from apps.core.web import refusals
from apps.sharedfs import selectors, services
from apps.tenants.decorators import operator_view, organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import operated_park


@organization_view()
@require_http_methods(["GET", "POST"])
def overview(request):
    organization = request.organization
    if request.method == "POST":
        if not can(request.membership.role, Action.ORDER):
            raise Http404
        region_id = parse_id(request.POST.get("region"))
        region = Region.objects.filter(park_id=organization.park_id, pk=region_id).first()
        if region is None:
            messages.error(request, _("Choose one of the park's regions."))
            return render(request, "sharedfs/overview.html", _overview_context(request), status=422)
        with refusals(request) as outcome:
            services.create_file_system(
                actor=request.user, organization=organization, region=region
            )
        if not outcome.refused:
            messages.success(
                request,
                _(
                    "Shared file storage created in %(region)s: hosts there mount it at /shared "
                    "from their next start."
                )
                % {"region": region.name},
            )
        return redirect("sharedfs:overview")
    return render(request, "sharedfs/overview.html", _overview_context(request))


def _overview_context(request) -> dict:
    return {
        "rows": selectors.organization_rows(request.organization),
        "may_create": can(request.membership.role, Action.ORDER),
    }


@operator_view
def park_overview(request, park_id):
    park = operated_park(request.user, park_id)
    context = {"park": park, "rows": selectors.park_file_systems(park), "section": "infrastructure"}
    return render(request, "sharedfs/park_overview.html", context)
