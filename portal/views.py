"""The portal's own pages, above every app: the landing page and where a sign-in lands."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from apps.catalog.selectors import catalog_summary
from apps.tenants.selectors import is_operator


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page links; send them to the static icon."""
    return redirect(static("favicon.svg"))


def home(request):
    return render(request, "core/home.html", {"summary": catalog_summary()})


@login_required
def start(request):
    """Where a sign-in lands: the operator console, the current organization, or its creation."""
    if is_operator(request.user) and not request.membership:
        return redirect("operations:overview")
    if request.membership:
        return redirect("tenants:organization")
    return redirect("tenants:organization_create")
