from django.contrib import admin

from apps.core.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "actor_label",
        "action",
        "object_type",
        "object_repr",
        "organization_id",
        "ip_address",
    ]
    list_filter = ["action", "park_id"]
    search_fields = ["actor_label", "object_repr", "action"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
