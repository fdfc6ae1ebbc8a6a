from django.contrib import admin

from apps.operations.models import CapacitySample, IdlePolicy


@admin.register(CapacitySample)
class CapacitySampleAdmin(admin.ModelAdmin):
    list_display = [
        "taken_at",
        "park",
        "pool",
        "accelerators_total",
        "accelerators_allocated",
        "accelerators_idle",
        "utilization_pct",
        "watts",
    ]
    list_filter = ["park"]
    date_hierarchy = "taken_at"
    list_select_related = ["park", "pool__region"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(IdlePolicy)
class IdlePolicyAdmin(admin.ModelAdmin):
    list_display = ["park", "threshold_minutes", "auto_stop", "updated_at"]

    # Changed on the park's idle-capacity page (audited), not here.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
