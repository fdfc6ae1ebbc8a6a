from django.contrib import admin

from apps.quotas.models import QuotaLimit


@admin.register(QuotaLimit)
class QuotaLimitAdmin(admin.ModelAdmin):
    list_display = ["park", "organization", "resource", "accelerator_model", "limit", "updated_at"]
    list_filter = ["park", "resource"]
