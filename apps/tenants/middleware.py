from django.http import JsonResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _

from apps.tenants.models import Membership, Role

SESSION_KEY = "loam_organization_id"


def current_membership(request) -> Membership | None:
    """The membership of the organization the user is working in (chosen in the session,
    else the first one). None for anonymous users and users without organizations."""
    user = request.user
    if not user.is_authenticated:
        return None
    memberships = Membership.objects.filter(user=user).select_related("organization__park")
    chosen = request.session.get(SESSION_KEY)
    membership = memberships.filter(organization_id=chosen).first() if chosen else None
    return membership or memberships.order_by("organization__name").first()


class CurrentOrganizationMiddleware:
    """Sets `request.membership` and `request.organization` (None when there is none: a plain
    value, so `is None` checks hold; one query, and only for signed-in users)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.membership = current_membership(request)
        request.organization = request.membership.organization if request.membership else None
        return self.get_response(request)


# Paths a user who must set up two-factor authentication can still reach.
MFA_SETUP_ALLOWED = ("/accounts/", "/i18n/", "/static/", "/healthz")


class MfaRequiredMiddleware:
    """Where a park requires it, operators and organization owners must enable TOTP first."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = request.user
        if (
            user.is_authenticated
            and not request.path.startswith(MFA_SETUP_ALLOWED)
            and mfa_required(user)
            and not has_totp(user)
        ):
            # A browser session calling the API, or nginx asking whether it may open a host's
            # web service (which takes no redirect): a refusal, not the setup page.
            if request.path.startswith(("/api/", "/internal/")):
                return JsonResponse(
                    {
                        "detail": _("Set up two-factor authentication first."),
                        "code": "mfa_required",
                    },
                    status=403,
                )
            return redirect("mfa_activate_totp")
        return self.get_response(request)


def mfa_required(user) -> bool:
    operates = user.operated_parks.filter(park__require_mfa_for_operators=True).exists()
    owns = Membership.objects.filter(
        user=user, role=Role.OWNER, organization__park__require_mfa_for_owners=True
    ).exists()
    return operates or owns


def has_totp(user) -> bool:
    from allauth.mfa.models import Authenticator

    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()
