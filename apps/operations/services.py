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
