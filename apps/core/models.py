"""The ground floor's one table: the audit log every app writes through `apps.core.audit`."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditEvent(models.Model):
    """Who did what to which object, from where. Append-only."""

    # The park and organization an event concerns, by id and not by foreign key: the log is
    # history, which no deletion may rewrite or block, and the tenants sit a floor above
    # (docs/architecture.md). What they are named is read from tenants by whoever shows them.
    park_id = models.BigIntegerField(_("park"), null=True, blank=True)
    organization_id = models.BigIntegerField(_("organization"), null=True, blank=True)
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
            models.Index(fields=["organization_id", "-created_at"]),
            models.Index(fields=["park_id", "-created_at"]),
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["action"]),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"
