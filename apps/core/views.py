from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.catalog.selectors import catalog_summary
from apps.core.health import broker_status, database_status
from apps.tenants.selectors import is_operator


@never_cache
@require_GET
def healthz(request):
    checks = {"database": database_status(), "broker": broker_status()}
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status=200 if healthy else 503,
    )


@login_required
def start(request):
    """Where a sign-in lands: the operator console, the current organization, or its creation."""
    if is_operator(request.user) and not request.membership:
        return redirect("operations:overview")
    if request.membership:
        return redirect("tenants:organization")
    return redirect("tenants:organization_create")


def home(request):
    return render(request, "core/home.html", {"summary": catalog_summary()})
