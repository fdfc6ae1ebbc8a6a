"""The operator console's periodic work, for Celery beat (every task is safe to run twice):

- `apps.operations.tasks.probe_backends`   every minute: capacity, health and accelerator
  telemetry of each enabled backend (idle detection reads it)
- `apps.operations.tasks.sample_capacity`  every 5 minutes: one CapacitySample per pool, what
  the overview's utilization and energy charts draw
- `apps.operations.tasks.enforce_idle_policies`  every 5 minutes: stop hosts idle past their
  park's threshold where the park's idle policy says so

and `send_instance_notice`, the owners' email, queued after commit by the services.
"""

from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from apps.orchestration.models import Backend
from apps.orders.models import Instance
from apps.tenants.models import Role

NOTICE_KINDS = ("idle", "idle_stopped", "force_released")


@shared_task
def probe_backends() -> int:
    from apps.orchestration.services import probe_backend

    backends = list(Backend.objects.filter(is_enabled=True).order_by("pk"))
    for backend in backends:
        probe_backend(backend=backend)
    return len(backends)


@shared_task
def sample_capacity() -> int:
    from apps.operations.services.infrastructure import sample_capacity as take_samples

    return len(take_samples())


@shared_task
def enforce_idle_policies() -> int:
    from apps.operations.services.instances import enforce_idle_policies as enforce

    return len(enforce())


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_instance_notice(instance_id: int, kind: str, reason: str = "") -> int:
    """Mail the organization's owners about their instance; returns how many were written to.
    `reason` is the operator's (force_released) or the policy's threshold in minutes
    (idle_stopped)."""
    from apps.operations.selectors.idle import idle_reading

    if kind not in NOTICE_KINDS:
        raise ValueError(f"unknown notice {kind!r}")
    instance = (
        Instance.objects.select_related("organization__park", "node", "flavor")
        .filter(pk=instance_id)
        .first()
    )
    if instance is None:
        return 0
    recipients = sorted(
        {
            m.user.email
            for m in instance.organization.memberships.filter(role=Role.OWNER).select_related(
                "user"
            )
            if m.user.email
        }
    )
    if not recipients:
        return 0
    reading = idle_reading(instance) if kind == "idle" else None
    with translation.override(settings.LANGUAGE_CODE):
        context = {
            "instance": instance,
            "kind": kind,
            "reason": reason,
            "idle_since": reading[0] if reading else None,
            "url": settings.LOAM_BASE_URL
            + reverse("orders:instance_detail", kwargs={"instance_id": instance.pk}),
        }
        subject = render_to_string("operations/email/instance_notice_subject.txt", context)
        body = render_to_string("operations/email/instance_notice_body.txt", context)
    send_mail(" ".join(subject.split()), body, None, recipients)
    return len(recipients)
