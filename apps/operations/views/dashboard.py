from datetime import timedelta

from django.shortcuts import render

from apps.operations.selectors import counted_pools
from apps.operations.selectors.dashboard import (
    backends_with_errors,
    capacity_breakdown,
    capacity_chart,
    queues,
)
from apps.operations.views._common import parks_of
from apps.tenants.decorators import operator_view
from apps.tenants.models import VerificationState
from apps.tenants.selectors import organizations_for_operator

PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


@operator_view
def overview(request):
    parks = list(parks_of(request))
    pools = counted_pools(parks)
    totals = {
        "total": sum(p.total for p in pools),
        "allocated": sum(p.allocated for p in pools),
    }
    totals["free"] = totals["total"] - totals["allocated"]
    period = request.GET.get("period") if request.GET.get("period") in PERIODS else "24h"
    awaiting = organizations_for_operator(request.user).filter(
        verification_state=VerificationState.SUBMITTED
    )
    context = {
        "parks": parks,
        "pools": pools,
        "totals": totals,
        "breakdown": capacity_breakdown(pools),
        "series": capacity_chart(parks, period=PERIODS[period]),
        "period": period,
        "periods": list(PERIODS),
        "queues": queues(parks),
        "awaiting": awaiting.count(),
        "failing_backends": list(backends_with_errors(parks)),
    }
    return render(request, "operations/overview.html", context)
