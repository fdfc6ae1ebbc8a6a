from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from apps.operations.selectors import pool_capacity
from apps.tenants.selectors import is_operator, parks_operated_by


@login_required
def overview(request):
    if not is_operator(request.user):
        raise PermissionDenied
    parks = parks_operated_by(request.user)
    pools = list(pool_capacity(parks))
    totals = {
        "total": sum(p.total for p in pools),
        "allocated": sum(p.allocated for p in pools),
    }
    totals["free"] = totals["total"] - totals["allocated"]
    return render(
        request, "operations/overview.html", {"parks": parks, "pools": pools, "totals": totals}
    )
