from django.contrib import admin

from apps.billing.models import (
    BankTransfer,
    Invoice,
    LedgerEntry,
    Payment,
    UsageRecord,
    VatInvoiceRequest,
    Wallet,
)

# Money moves through billing services; the admin shows it read-only.


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdmin):
    list_display = [
        "organization",
        "mode",
        "balance_minor",
        "held_minor",
        "credit_limit_minor",
        "currency",
    ]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "wallet", "kind", "amount_minor", "balance_after_minor"]
    list_filter = ["kind"]


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "wallet", "amount_minor", "currency", "state"]
    list_filter = ["state"]


@admin.register(Invoice)
class InvoiceAdmin(ReadOnlyAdmin):
    list_display = ["number", "organization", "period_start", "period_end", "total_minor", "state"]
    list_filter = ["state"]


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["started_at", "organization", "workload", "seconds", "amount_minor"]


@admin.register(BankTransfer)
class BankTransferAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "reference", "organization", "amount_minor", "state"]
    list_filter = ["state"]
    search_fields = ["reference"]


@admin.register(VatInvoiceRequest)
class VatInvoiceRequestAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "organization", "kind", "amount_minor", "state", "number"]
    list_filter = ["state", "kind"]
    search_fields = ["number", "title", "taxpayer_id"]
