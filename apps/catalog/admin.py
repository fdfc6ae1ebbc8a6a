from django.contrib import admin

from apps.catalog.models import AcceleratorModel, Flavor, FlavorFamily, Image, Price, Region


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    list_display = ["name", "code", "level", "parent", "park", "latency_ms"]
    list_filter = ["park", "level"]


@admin.register(AcceleratorModel)
class AcceleratorModelAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "vendor",
        "fp16_tflops",
        "memory_gb",
        "tdp_w",
        "software_stack",
        "domestic",
        "compute_units",
    ]
    list_filter = ["vendor", "software_stack", "domestic"]


class FlavorInline(admin.TabularInline):
    model = Flavor
    extra = 0


@admin.register(FlavorFamily)
class FlavorFamilyAdmin(admin.ModelAdmin):
    list_display = ["name", "code", "accelerator_model", "resource_type", "park"]
    list_filter = ["park", "resource_type"]
    inlines = [FlavorInline]


@admin.register(Flavor)
class FlavorAdmin(admin.ModelAdmin):
    list_display = [
        "code",
        "family",
        "accelerator_count",
        "vcpu",
        "ram_gb",
        "system_disk_gb",
        "is_active",
    ]
    list_filter = ["family", "is_active"]
    list_select_related = ["family"]


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ["name", "os", "software_stack", "stack_version", "is_active"]
    list_filter = ["software_stack", "is_active"]
    filter_horizontal = ["compatible_accelerators"]


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["region", "kind", "flavor", "amount_minor", "currency", "effective_from"]
    list_filter = ["region", "kind"]
    list_select_related = ["region", "flavor"]
