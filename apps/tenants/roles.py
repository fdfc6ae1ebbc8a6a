"""The role matrix: who may do what in an organization. Views, the API, templates and services
all ask `can()`; nothing else decides."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from apps.tenants.models import ApiKeyScope, Role


class Action(models.TextChoices):
    VIEW = "view", _("See instances, tasks and orders")
    ORDER = "order", _("Order, resize and start or stop instances")
    RELEASE = "release", _("Release instances")
    VIEW_BILLING = "view_billing", _("See bills and usage")
    MANAGE_BILLING = "manage_billing", _("Top up and manage payment")
    MANAGE_MEMBERS = "manage_members", _("Invite members and change roles")
    MANAGE_API_KEYS = "manage_api_keys", _("Create and revoke API keys")
    MANAGE_ORGANIZATION = "manage_organization", _("Edit the organization and its verification")


_A = Action
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    Role.OWNER: frozenset(_A.values),
    Role.ADMIN: frozenset(set(_A.values) - {_A.MANAGE_BILLING}),
    Role.MEMBER: frozenset({_A.VIEW, _A.ORDER, _A.RELEASE}),
    Role.BILLING: frozenset({_A.VIEW, _A.VIEW_BILLING, _A.MANAGE_BILLING}),
    Role.VIEWER: frozenset({_A.VIEW}),
}

# An API key acts for its organization within its scope; it never manages people or money.
API_KEY_ACTIONS: dict[str, frozenset[str]] = {
    ApiKeyScope.READ: frozenset({_A.VIEW, _A.VIEW_BILLING}),
    ApiKeyScope.WRITE: frozenset(
        {_A.VIEW, _A.VIEW_BILLING, _A.ORDER, _A.RELEASE, _A.MANAGE_API_KEYS}
    ),
}


def can(role: str | None, action: str) -> bool:
    return role is not None and action in ROLE_ACTIONS.get(role, frozenset())


def key_can(scope: str, action: str) -> bool:
    return action in API_KEY_ACTIONS.get(scope, frozenset())


def roles_assignable_by(role: str | None) -> list[str]:
    """Only an owner makes (or unmakes) owners; an admin assigns the other roles."""
    if role == Role.OWNER:
        return list(Role.values)
    if can(role, Action.MANAGE_MEMBERS):
        return [r for r in Role.values if r != Role.OWNER]
    return []
