from django.contrib import admin

from apps.agents.models import AgentCard, AgentHost, AgentHostPort, AgentServer, JoinToken


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "pool", "created_by", "created_at", "expires_at", "used_at"]
    list_filter = ["pool"]
    readonly_fields = ["token_hash", "prefix", "created_at", "used_at", "revoked_at"]


class AgentCardInline(admin.TabularInline):
    model = AgentCard
    extra = 0
    fields = ["uuid", "model", "health", "utilization_pct", "power_w", "vanished_at"]
    readonly_fields = fields
    can_delete = False


@admin.register(AgentServer)
class AgentServerAdmin(admin.ModelAdmin):
    list_display = [
        "public_id",
        "node",
        "public_address",
        "agent_version",
        "last_heartbeat_at",
        "revoked_at",
    ]
    search_fields = ["public_id", "hostname", "node__hostname"]
    readonly_fields = ["public_id", "credential_hash", "enrolled_at", "last_heartbeat_at"]
    inlines = [AgentCardInline]


class AgentHostPortInline(admin.TabularInline):
    """Allocated by the driver's store (apps.agents.hosts), freed when the host is removed."""

    model = AgentHostPort
    extra = 0
    fields = ["purpose", "protocol", "server_port", "host_port", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(AgentHost)
class AgentHostAdmin(admin.ModelAdmin):
    list_display = ["handle", "name", "server", "generation", "state", "reported_state"]
    list_filter = ["state", "reported_state"]
    search_fields = ["handle", "name"]
    readonly_fields = ["state"]  # it changes through its transition table (AGENT_HOST_TRANSITIONS)
    inlines = [AgentHostPortInline]
