from django.http import JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.core.health import broker_status, database_status

RETRY_BUSY_AFTER_S = 1


def not_found(request, exception=None):
    """API paths answer problem+json; pages get the HTML 404."""
    if request.path.startswith("/api/"):
        return _api_problem(404, "not_found", "Not Found", "No such resource.")
    return defaults.page_not_found(request, exception)


def server_error(request):
    if request.path.startswith("/api/"):
        return _api_problem(
            500,
            "server_error",
            "Internal Server Error",
            "The server failed; the request may be retried.",
        )
    return defaults.server_error(request)


def busy(request):
    """A request whose transaction lost a race for rows and was rolled back (see
    apps.core.contention): asking again in a moment succeeds."""
    if request.path.startswith("/api/"):
        response = _api_problem(
            503,
            "busy",
            "Service Unavailable",
            "The request met another one changing the same records and was rolled back; retry it.",
        )
    else:
        response = render(request, "503.html", status=503)
    response["Retry-After"] = str(RETRY_BUSY_AFTER_S)
    return response


def _api_problem(status, code, title, detail):
    return JsonResponse(
        {
            "type": f"https://loam.localhost/problems/{code}",
            "title": title,
            "status": status,
            "detail": detail,
        },
        status=status,
        content_type="application/problem+json",
    )


@never_cache
@require_GET
def healthz(request):
    checks = {"database": database_status(), "broker": broker_status()}
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks},
        status=200 if healthy else 503,
    )
