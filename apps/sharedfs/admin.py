from django.contrib import admin

from apps.sharedfs.models import SharedFileSystem


@admin.register(SharedFileSystem)
class SharedFileSystemAdmin(admin.ModelAdmin):
    list_display = ["name", "organization", "region", "used_bytes", "usage_read_at", "created_at"]
    list_filter = ["region"]
    readonly_fields = ["workload"]
