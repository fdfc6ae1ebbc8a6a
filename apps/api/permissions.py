from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import BasePermission

from apps.tenants.access import allowed
from apps.tenants.models import ApiKey


def current_organization(request):
    """The organization a call acts for: the API key's, or the session's current one."""
    if isinstance(request.auth, ApiKey):
        return request.auth.organization
    return request.organization if request.user.is_authenticated else None


def current_actor(request):
    return request.auth if isinstance(request.auth, ApiKey) else request.user


class OrganizationAction(BasePermission):
    """The view names the action each of its methods needs (`required_actions`)."""

    message = _("Your role or key scope does not allow this.")

    def has_permission(self, request, view):
        organization = current_organization(request)
        if organization is None:
            return False
        action = view.required_actions.get(getattr(view, "action", None) or request.method.lower())
        if action is None:
            # A method the view does not take: let DRF answer 405. Any other unmapped case is
            # a view that forgot its table, and is refused.
            return request.method not in view.allowed_methods
        return allowed(current_actor(request), organization, action)
