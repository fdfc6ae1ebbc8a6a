from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import translation

from apps.tenants.models import Invitation


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_invitation_email(invitation_id: int, token: str) -> None:
    invitation = (
        Invitation.objects.select_related("organization", "invited_by")
        .filter(pk=invitation_id, accepted_at__isnull=True, revoked_at__isnull=True)
        .first()
    )
    if invitation is None:  # accepted or revoked before the mail went out
        return
    with translation.override(settings.LANGUAGE_CODE):
        context = {
            "invitation": invitation,
            "url": settings.LOAM_BASE_URL + reverse("tenants:invitation", args=[token]),
        }
        subject = render_to_string("tenants/email/invitation_subject.txt", context).strip()
        body = render_to_string("tenants/email/invitation_body.txt", context)
    send_mail(subject, body, None, [invitation.email])
