from django.contrib import admin

from apps.sharedfs.models import SharedFileSystem


@admin.register(SharedFileSystem)
class SharedFileSystemAdmin(admin.ModelAdmin):
    list_display = ["name", "organization", "region", "state", "used_bytes", "usage_read_at"]
    list_display += ["created_at"]
    list_filter = ["region", "state"]
    readonly_fields = ["workload"]
