from django.contrib import admin

from apps.core.transactions import lock
from apps.orchestration.models import (
    Accelerator,
    Allocation,
    Backend,
    CapacitySample,
    Node,
    Placement,
    Pool,
    SchedulingPolicy,
    Task,
)
from apps.orchestration.rooms import ROOM_FIELDS, recount


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin):
    list_display = ["name", "driver", "park", "is_enabled", "last_checked_at"]
    list_filter = ["driver", "is_enabled"]
    # A driver and its config are checked when registered (register_backend: the driver answers,
    # its endpoint is no other backend's); an edit here would skip that.
    readonly_fields = ["driver", "config", "endpoint"]


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "backend",
        "region",
        "accelerator_model",
        "pue",
        "carbon_g_per_kwh",
        "is_schedulable",
    ]
    list_filter = ["region", "accelerator_model", "is_schedulable"]


class AcceleratorInline(admin.TabularInline):
    model = Accelerator
    extra = 0
    readonly_fields = ["allocation"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "pool", "vcpu_total", "ram_gb_total", "health", "is_drained"]
    list_filter = ["pool", "health", "is_drained"]
    inlines = [AcceleratorInline]
    # Kept by the portal (what the node has free, counted; what its loaded cards draw).
    readonly_fields = [*ROOM_FIELDS, "loaded_watts", "loaded_watts_at"]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        # Cards edited here change what the node has free: counted again under its lock.
        lock(Node, form.instance.pk)
        recount([form.instance.pk])


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = [
        "node",
        "workload",
        "vcpu",
        "ram_gb",
        "share_milli",
        "created_at",
        "released_at",
    ]
    raw_id_fields = ["node", "workload", "shared_accelerator"]


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    list_display = ["created_at", "workload", "chosen_pool", "chosen_node"]
    raw_id_fields = ["workload", "chosen_pool", "chosen_node"]


@admin.register(SchedulingPolicy)
class SchedulingPolicyAdmin(admin.ModelAdmin):
    """Operators change it at /ops/tasks/policy/<park>/ (audited); here for platform admins."""

    list_display = [
        "park",
        "region_weight",
        "performance_weight",
        "energy_weight",
        "price_weight",
        "fragmentation_weight",
        "operator_share",
        "updated_at",
    ]
    readonly_fields = ["updated_at", "updated_by"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "organization",
        "accelerator_model",
        "accelerator_milli",
        "node_count",
        "state",
        "priority",
        "submitted_at",
    ]
    list_filter = ["state", "preference"]
    readonly_fields = ["state", "started_at", "finished_at"]
    raw_id_fields = ["node", "pool"]


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
