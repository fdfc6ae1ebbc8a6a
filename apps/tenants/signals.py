"""Sign-in events for the audit log. Django's auth signals fire for every way of logging in
(allauth's pages, the admin), so none can slip past."""

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from apps.core.audit import record_event
from apps.core.web import client_ip


@receiver(user_logged_in, dispatch_uid="loam.audit.login")
def audit_login(sender, request, user, **kwargs):
    record_event(
        action="auth.login",
        actor=user,
        target=user,
        ip_address=client_ip(request),
    )


@receiver(user_login_failed, dispatch_uid="loam.audit.login_failed")
def audit_login_failed(sender, credentials, request=None, **kwargs):
    identifier = credentials.get("email") or credentials.get("username") or ""
    record_event(
        action="auth.login_failed",
        actor_label=f"anonymous:{identifier}"[:120],
        ip_address=client_ip(request),
        data={"identifier": identifier},
    )
