from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from apps.tenants.models import Organization

# The events an endpoint may subscribe to. Emitting any other name is a programming error.
EVENT_TYPES = (
    "order.submitted",
    "order.approved",
    "order.rejected",
    "order.done",
    "order.failed",
    "order.cancelled",
    "instance.running",
    "instance.stopped",
    "instance.error",
    "instance.released",
    "invoice.issued",
)

URL_MAX_LENGTH = 500


class WebhookEndpoint(models.Model):
    """A partner's URL that receives signed POSTs for the event types it subscribed to."""

    organization = models.ForeignKey(
        Organization,
        on_delete=models.CASCADE,
        related_name="webhook_endpoints",
        verbose_name=_("organization"),
    )
    url = models.URLField(_("URL"), max_length=URL_MAX_LENGTH)
    # Stored as is, unlike API keys (hashed): we sign every delivery with it, so we need the
    # secret itself. It is shown to the tenant once, at creation, and never served again.
    secret = models.CharField(_("signing secret"), max_length=80)
    event_types = models.JSONField(_("event types"), default=list)
    is_active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(url__startswith="https://") | Q(url__startswith="http://"),
                name="webhook_endpoint_url_http",
            ),
            models.CheckConstraint(
                condition=Q(secret__length__gte=32), name="webhook_endpoint_secret_long"
            ),
        ]
        indexes = [models.Index(fields=["organization", "is_active"])]

    def __str__(self):
        return self.url


class DeliveryState(models.TextChoices):
    PENDING = "pending", _("Pending")
    DELIVERED = "delivered", _("Delivered")
    FAILED = "failed", _("Failed")


_D = DeliveryState
DELIVERY_TRANSITIONS = {
    _D.PENDING: frozenset({_D.DELIVERED, _D.FAILED}),
    # A redelivery starts a new series of attempts.
    _D.DELIVERED: frozenset({_D.PENDING}),
    _D.FAILED: frozenset({_D.PENDING}),
}


class WebhookDelivery(models.Model):
    """One event sent to one endpoint, with the outcome of its latest attempt. All endpoints
    that receive the same event share its `event_id`, which receivers use to deduplicate."""

    endpoint = models.ForeignKey(
        WebhookEndpoint,
        on_delete=models.CASCADE,
        related_name="deliveries",
        verbose_name=_("endpoint"),
    )
    event_id = models.UUIDField(_("event ID"))
    event_type = models.CharField(
        _("event type"), max_length=40, choices=[(t, t) for t in EVENT_TYPES]
    )
    payload = models.JSONField(_("payload"), encoder=DjangoJSONEncoder)
    state = models.CharField(
        _("state"), max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_status_code = models.PositiveSmallIntegerField(_("last status code"), null=True)
    last_error = models.TextField(_("last error"), blank=True)
    next_attempt_at = models.DateTimeField(_("next attempt at"), null=True, blank=True)
    delivered_at = models.DateTimeField(_("delivered at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint", "event_id"], name="webhook_delivery_event_once"
            ),
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="webhook_delivery_state_known"
            ),
            models.CheckConstraint(
                condition=Q(event_type__in=EVENT_TYPES), name="webhook_delivery_event_type_known"
            ),
            models.CheckConstraint(
                condition=~Q(state=DeliveryState.DELIVERED) | Q(delivered_at__isnull=False),
                name="webhook_delivery_delivered_has_time",
            ),
        ]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]

    def __str__(self):
        return f"{self.event_type} → {self.endpoint} ({self.get_state_display()})"

    @property
    def organization(self):
        """Whose delivery it is (the audit log files its state changes under it)."""
        return self.endpoint.organization
