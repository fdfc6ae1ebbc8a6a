"""The portal's own pages, above every app: the landing page (a member's console home) and
where a sign-in lands."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from apps.catalog.selectors import catalog_summary
from apps.tenants.roles import Action, can
from apps.tenants.selectors import is_operator
from portal.selectors import tenant_home


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request):
    """Browsers ask for /favicon.ico whatever the page links; send them to the static icon."""
    return redirect(static("favicon.svg"))


def home(request):
    """A member's console home (what runs, what it costs, what needs them); else the public
    landing page with the park's accelerators."""
    if request.membership is None:
        return render(request, "core/home.html", {"summary": catalog_summary()})
    home = tenant_home(
        request.organization, with_billing=can(request.membership.role, Action.VIEW_BILLING)
    )
    return render(request, "core/tenant_home.html", {"home": home})


@require_GET
def terms(request):
    """The terms of service an enterprise accepts when it signs up (templates/core/terms.html,
    the park operator's to word)."""
    return render(request, "core/terms.html")


@login_required
def start(request):
    """Where a sign-in lands: the operator console, the member's console home, or creating an
    organization."""
    if is_operator(request.user) and not request.membership:
        return redirect("operations:overview")
    if request.membership:
        return redirect("portal:home")
    return redirect("tenants:organization_create")
