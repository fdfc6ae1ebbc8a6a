"""The audit log: `record_event` is how every app says who did what to which object.

It sits on the ground floor so that any app, and `apps.core.transitions`, can write to it
without importing the apps above; the park and organization are read off the target."""

from contextvars import ContextVar

from django.contrib.auth import get_user_model
from django.db import models

from apps.core.models import AuditEvent
from apps.core.transactions import written_on_leaving

# The events recorded inside `recorded_together`, not yet written; None outside it.
_pending: ContextVar[list | None] = ContextVar("audit_events_pending", default=None)


def recorded_together():
    """The audit events recorded inside are written in one INSERT on leaving, in the order they
    were recorded: for a use case that records several (an order records four: submitted,
    approved, fulfilling, provisioning). Use it inside the transaction that does the work (a
    `with` block, or a decorator under `transaction.atomic`'s); leaving by an exception writes
    nothing, as that transaction is rolled back."""
    return written_on_leaving(_pending, AuditEvent.objects.bulk_create)


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
    """Append one audit event. The organization and park default to the target's own. Inside
    `recorded_together` it is written on leaving that block (the event returned is unsaved)."""
    organization = organization or _own_or_attribute(target, "tenants.Organization", "organization")
    park = park or (
        organization.park if organization else _own_or_attribute(target, "tenants.Park", "park")
    )
    user, label = audit_identity(actor)
    event = AuditEvent(
        park_id=park.pk if park else None,
        organization_id=organization.pk if organization else None,
        actor=user,
        actor_label=(actor_label or label)[:120],
        action=action,
        object_type=target._meta.label_lower if target is not None else "",
        object_id=str(target.pk) if target is not None else "",
        object_repr=str(target)[:200] if target is not None else "",
        ip_address=ip_address,
        data=data or {},
    )
    pending = _pending.get()
    if pending is None:
        event.save(force_insert=True)
    else:
        pending.append(event)
    return event


def _own_or_attribute(target, model_label: str, attribute: str):
    """`target` itself if it is a `model_label` row, else its `attribute` (or None)."""
    if target is not None and target._meta.label == model_label:
        return target
    return getattr(target, attribute, None)
