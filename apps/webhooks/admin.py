from django.contrib import admin

from apps.webhooks.models import WebhookDelivery, WebhookEndpoint


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "organization", "is_active", "created_at"]
    list_filter = ["is_active"]
    list_select_related = ["organization"]
    search_fields = ["url", "organization__name"]
    # The signing secret was shown to the tenant once; the admin never displays it.
    exclude = ["secret"]
    readonly_fields = ["organization", "created_at"]

    def has_add_permission(self, request):
        return False  # endpoints are created through apps.webhooks.services, which makes the secret


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["event_type", "endpoint", "state", "attempts", "last_status_code", "created_at"]
    list_filter = ["state", "event_type"]
    list_select_related = ["endpoint"]
    search_fields = ["event_id", "endpoint__url"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
