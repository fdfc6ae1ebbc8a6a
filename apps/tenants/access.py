"""Who the actor is in an organization, and the one check every service makes before acting."""

from django.utils import timezone
from django.utils.translation import gettext as _

from apps.core.errors import PermissionDenied
from apps.tenants.models import ApiKey, Membership, Organization, Park
from apps.tenants.roles import can, key_can
from apps.tenants.selectors import is_operator_of


def role_of(user, organization: Organization) -> str | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return (
        Membership.objects.filter(user=user, organization=organization)
        .values_list("role", flat=True)
        .first()
    )


def is_usable_key(key: ApiKey) -> bool:
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > timezone.now())


class SystemActor:
    """The platform acting by its own rules (billing, park policies): allowed every action and
    named in the audit log, e.g. `SystemActor("billing")`."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self):
        return f"system:{self.name}"


def allowed(actor, organization: Organization, action: str) -> bool:
    if isinstance(actor, SystemActor):
        return True
    if isinstance(actor, ApiKey):
        return (
            actor.organization_id == organization.pk
            and is_usable_key(actor)
            and key_can(actor.scope, action)
        )
    return can(role_of(actor, organization), action)


def authorize(actor, organization: Organization, action: str) -> None:
    """Raise PermissionDenied unless `actor` (a user or an API key) may do `action` here."""
    if not allowed(actor, organization, action):
        raise PermissionDenied(_("Your role in this organization does not allow this."))


def require_operator(operator, park: Park, message: str | None = None) -> None:
    """Raise PermissionDenied unless `operator` operates `park` (or is a platform superuser)."""
    if not is_operator_of(operator, park):
        raise PermissionDenied(message or _("Only this park's operators may do this."))
