from django.db import models
from django.utils.translation import gettext_lazy as _


class IdempotencyRecord(models.Model):
    """The first response to a POST with an `Idempotency-Key`, replayed for 24 h to a retry with
    the same key and body. `caller` is whose key space it is in: the organization the call acted
    for ("org:<id>", whichever of its API keys or members sent it), or a user ("user:<id>") for
    a call with no organization and for operator routes."""

    caller = models.CharField(_("caller"), max_length=40)
    key = models.CharField(_("idempotency key"), max_length=255)
    method = models.CharField(_("method"), max_length=8)
    path = models.CharField(_("path"), max_length=500)
    body_hash = models.CharField(_("body hash"), max_length=64)
    status_code = models.PositiveSmallIntegerField(_("status code"), null=True, blank=True)
    response_body = models.JSONField(_("response body"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = _("idempotency record")
        verbose_name_plural = _("idempotency records")
        constraints = [
            models.UniqueConstraint(fields=["caller", "key"], name="idempotency_key_unique"),
        ]

    def __str__(self):
        return f"{self.caller} {self.key}"
