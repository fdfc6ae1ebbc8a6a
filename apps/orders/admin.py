from django.contrib import admin

from apps.orders.models import IdlePolicy, Instance, Order, SecurityGroup, SecurityGroupRule

# State fields are read-only here: every transition goes through apps.orders.services.


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = ["name", "organization", "flavor", "region", "node", "state", "created_at"]
    list_filter = ["state", "region"]
    search_fields = ["name"]
    readonly_fields = ["state", "released_at"]
    raw_id_fields = ["node", "pool"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["pk", "kind", "organization", "state", "hourly_minor", "currency", "created_at"]
    list_filter = ["kind", "state"]
    readonly_fields = ["state", "decided_by", "decided_at"]
    raw_id_fields = ["instance"]


@admin.register(IdlePolicy)
class IdlePolicyAdmin(admin.ModelAdmin):
    list_display = ["park", "threshold_minutes", "auto_stop", "updated_at"]

    # Changed on the park's idle-capacity page (audited), not here.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class SecurityGroupRuleInline(admin.TabularInline):
    model = SecurityGroupRule
    extra = 0
    fields = ["protocol", "from_port", "to_port", "source", "description"]
    readonly_fields = fields


@admin.register(SecurityGroup)
class SecurityGroupAdmin(admin.ModelAdmin):
    """Read only: a change must reach the group's hosts (apps.orders.networking)."""

    list_display = ["name", "organization", "is_default", "created_at"]
    search_fields = ["name", "organization__name"]
    inlines = [SecurityGroupRuleInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
