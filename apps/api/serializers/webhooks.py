"""Input serializers validate (every field, with the rule's own message); the services act;
output serializers render. The secret appears only in the answer to a create."""

from rest_framework import serializers

from apps.api.serializers.fields import InputSerializer
from apps.webhooks.models import EVENT_TYPES, WebhookDelivery, WebhookEndpoint
from apps.webhooks.validators import validate_event_types, validate_url

EVENT_TYPES_HELP = "Event type names, from: " + ", ".join(EVENT_TYPES) + "."


class WebhookEndpointInputSerializer(InputSerializer):
    url = serializers.CharField(
        validators=[validate_url],
        help_text="https:// URL that receives the POSTs (http:// only where the portal allows).",
    )
    event_types = serializers.ListField(
        child=serializers.CharField(), validators=[validate_event_types], help_text=EVENT_TYPES_HELP
    )
    is_active = serializers.BooleanField(default=True)


class WebhookEndpointUpdateSerializer(WebhookEndpointInputSerializer):
    """Every field optional (PATCH); what is left out stays as it is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = False
            field.default = serializers.empty


class WebhookEndpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["id", "url", "event_types", "is_active", "created_at"]
        read_only_fields = fields


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="Signing secret, shown only in this answer: store it now.",
    )

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event_id",
            "event_type",
            "state",
            "attempts",
            "last_status_code",
            "last_error",
            "next_attempt_at",
            "delivered_at",
            "created_at",
            "payload",
        ]
        read_only_fields = fields
