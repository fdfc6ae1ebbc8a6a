"""The audit log (`record_event`, which every app calls) and the operator console's use cases,
one module per part of the back office: `catalog`, `infrastructure`, `instances`, `tenants`.
The submodules import other apps' services; this one stays import-light, since they import it."""

from django.db import models

from apps.operations.models import AuditEvent
from apps.tenants.access import audit_identity
from apps.tenants.models import Organization, Park


def record_event(
    *,
    action: str,
    actor=None,
    actor_label: str = "",
    target: models.Model | None = None,
    organization: Organization | None = None,
    park: Park | None = None,
    ip_address: str | None = None,
    data: dict | None = None,
) -> AuditEvent:
    """Append one audit event. The organization and park default to the target's own."""
    organization = organization or _organization_of(target)
    park = park or (organization.park if organization else _park_of(target))
    user, label = audit_identity(actor)
    return AuditEvent.objects.create(
        park=park,
        organization=organization,
        actor=user,
        actor_label=(actor_label or label)[:120],
        action=action,
        object_type=target._meta.label_lower if target is not None else "",
        object_id=str(target.pk) if target is not None else "",
        object_repr=str(target)[:200] if target is not None else "",
        ip_address=ip_address,
        data=data or {},
    )


def _organization_of(target):
    if isinstance(target, Organization):
        return target
    return getattr(target, "organization", None)


def _park_of(target):
    if isinstance(target, Park):
        return target
    return getattr(target, "park", None)


def require_operator(operator, park: Park, message: str | None = None) -> None:
    """Raise PermissionDenied unless `operator` operates `park` (or is a platform superuser)."""
    from django.utils.translation import gettext as _

    from apps.core.errors import PermissionDenied
    from apps.tenants.selectors import is_operator_of

    if not is_operator_of(operator, park):
        raise PermissionDenied(message or _("Only this park's operators may do this."))
