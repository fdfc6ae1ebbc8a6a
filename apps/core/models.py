"""The ground floor's one table: the audit log every app writes through `apps.core.audit`.

Its foreign keys name tenants' models as strings, so the core imports no other app."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditEvent(models.Model):
    """Who did what to which object, from where. Append-only."""

    park = models.ForeignKey(
        "tenants.Park",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_events",
        verbose_name=_("park"),
    )
    organization = models.ForeignKey(
        "tenants.Organization",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="audit_events",
        verbose_name=_("organization"),
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("actor"),
    )
    # Who acted when no user did: "system", "api-key:ab12cd34", "worker".
    actor_label = models.CharField(_("actor"), max_length=120)
    action = models.CharField(_("action"), max_length=80)
    object_type = models.CharField(_("object type"), max_length=80, blank=True)
    object_id = models.CharField(_("object id"), max_length=40, blank=True)
    object_repr = models.CharField(_("object"), max_length=200, blank=True)
    ip_address = models.GenericIPAddressField(_("address"), null=True, blank=True)
    data = models.JSONField(_("details"), default=dict, blank=True)
    created_at = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)

    class Meta:
        # Moved from the operations app; the table keeps its name (a state-only migration).
        db_table = "operations_auditevent"
        verbose_name = _("audit event")
        verbose_name_plural = _("audit events")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["organization", "-created_at"]),
            models.Index(fields=["park", "-created_at"]),
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["action"]),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"
