"""文件存储: the organization's shared file storage per region (its usage, the hosts that mount
it, and its deletion by who may release), and the park's file systems with their usage for its
operators. There is no "create": the first host of the organization in a region makes it."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from apps.core.web import refusals
from apps.sharedfs import selectors, services
from apps.sharedfs.models import SharedFileSystem
from apps.tenants.decorators import operator_view, organization_view
from apps.tenants.roles import Action, can
from apps.tenants.selectors import operated_park


@organization_view()
def overview(request):
    context = {
        "rows": selectors.organization_rows(request.organization),
        "may_delete": can(request.membership.role, Action.RELEASE),
        "offered": services.offered(),
    }
    return render(request, "sharedfs/overview.html", context)


@organization_view(Action.RELEASE)
@require_POST
def delete(request, file_system_id):
    file_system = get_object_or_404(
        SharedFileSystem.objects.select_related("organization", "region"),
        pk=file_system_id,
        organization=request.organization,
    )
    with refusals(request) as outcome:
        services.delete_file_system(actor=request.user, file_system=file_system)
    if not outcome.refused:
        messages.success(
            request,
            _(
                "The shared file storage of %(region)s is being deleted with its files; billing "
                "for it has stopped. The next host started there gets a new, empty one."
            )
            % {"region": file_system.region.name},
        )
    return redirect("sharedfs:overview")


@operator_view
def park_overview(request, park_id):
    park = operated_park(request.user, park_id)
    context = {"park": park, "rows": selectors.park_file_systems(park), "section": "infrastructure"}
    return render(request, "sharedfs/park_overview.html", context)
