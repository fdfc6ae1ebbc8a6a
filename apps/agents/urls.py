"""Mounted at the site root: the console's agent pages under /ops/agents/ (namespace
"agents_ops", a park's operators only) and a host's card figures under /instances/ (namespace
"agents", the host's organization only). The agent API itself is `api_urls`."""

from django.urls import include, path

from apps.agents import views

operator_patterns = [
    path("parks/<int:park_id>/servers/", views.server_list, name="server_list"),
    path("parks/<int:park_id>/tokens/", views.token_list, name="token_list"),
]

tenant_patterns = [
    path(
        "<int:instance_id>/telemetry/",
        views.instance_telemetry,
        name="instance_telemetry",
    ),
]

urlpatterns = [
    path("ops/agents/", include((operator_patterns, "agents_ops"))),
    path("instances/", include((tenant_patterns, "agents"))),
]
