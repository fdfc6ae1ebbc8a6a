"""The audit log: `record_event` is how every app says who did what to which object.

It sits on the ground floor so that any app, and `apps.core.transitions`, can write to it
without importing the apps above; the park and organization are read off the target."""

from django.contrib.auth import get_user_model
from django.db import models

from apps.core.models import AuditEvent


def audit_identity(actor) -> tuple:
    """(user or None, label) for the audit log: API keys and the system are named, not linked.
    A non-user actor names itself with `audit_label` (an API key) or its `str` (the system)."""
    if actor is None:
        return None, "system"
    if isinstance(actor, get_user_model()):
        return actor, actor.get_username()
    return None, getattr(actor, "audit_label", None) or str(actor)


def record_event(
    *,
    action: str,
    actor=None,
    actor_label: str = "",
    target: models.Model | None = None,
    organization=None,
    park=None,
    ip_address: str | None = None,
    data: dict | None = None,
) -> AuditEvent:
    """Append one audit event. The organization and park default to the target's own."""
    organization = organization or _own_or_attribute(target, "tenants.Organization", "organization")
    park = park or (
        organization.park if organization else _own_or_attribute(target, "tenants.Park", "park")
    )
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


def _own_or_attribute(target, model_label: str, attribute: str):
    """`target` itself if it is a `model_label` row, else its `attribute` (or None)."""
    if target is not None and target._meta.label == model_label:
        return target
    return getattr(target, attribute, None)
