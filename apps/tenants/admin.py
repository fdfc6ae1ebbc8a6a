from django.contrib import admin

from apps.tenants.models import ApiKey, Invitation, Membership, Organization, Park, ParkOperator


@admin.register(Park)
class ParkAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "currency", "created_at"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(ParkOperator)
class ParkOperatorAdmin(admin.ModelAdmin):
    list_display = ["user", "park", "created_at"]
    list_select_related = ["user", "park"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):
    list_display = ["name", "park", "legal_name", "credit_code", "verification_state", "created_at"]
    list_filter = ["park", "verification_state"]
    search_fields = ["name", "legal_name", "credit_code"]
    # State moves through services (apps.tenants.services), never by editing the field here.
    readonly_fields = ["verification_state"]
    inlines = [MembershipInline]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["email", "organization", "role", "expires_at", "accepted_at", "revoked_at"]
    list_filter = ["role"]
    search_fields = ["email"]
    exclude = ["token_hash"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "organization", "scope", "last_used_at", "revoked_at"]
    list_filter = ["scope"]
    search_fields = ["name", "prefix"]
    exclude = ["key_hash"]
    readonly_fields = ["prefix", "last_used_at", "last_used_ip"]
