from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.catalog.selectors import catalog_summary
from apps.core.health import broker_status, database_status


@never_cache
@require_GET
def healthz(request):
    checks = {"database": database_status(), "broker": broker_status()}
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status=200 if healthy else 503,
    )


def home(request):
    return render(request, "core/home.html", {"summary": catalog_summary()})
