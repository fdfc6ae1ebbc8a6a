"""Mounted at the site root: the console's agent pages under /ops/agents/ (namespace
"agents_ops", a park's operators only) and a host's card figures and web terminal under
/instances/ (namespace "agents", the host's organization only); what a partner's server
downloads to install the agent under /agent/ (namespace "agent_install", public); nginx's check
before a host's web service and its page while one doesn't answer, under /internal/ (namespace
"agents_internal", for nginx); the organization's saved images under /images/ (namespace
"saved_images"). The agent API itself is `api_urls`; the terminal's WebSocket is
routed in portal/asgi.py."""

from django.urls import include, path

from apps.agents import catalog_views, distribution, saved_image_views, views

operator_patterns = [
    path("parks/<int:park_id>/servers/", views.server_list, name="server_list"),
    path("parks/<int:park_id>/tokens/", views.token_list, name="token_list"),
    path(
        "parks/<int:park_id>/servers/<int:server_id>/catalog/",
        catalog_views.server_catalog,
        name="server_catalog",
    ),
]

tenant_patterns = [
    path(
        "<int:instance_id>/telemetry/",
        views.instance_telemetry,
        name="instance_telemetry",
    ),
    path("<int:instance_id>/terminal/", views.instance_terminal, name="instance_terminal"),
]

image_patterns = [
    path("", saved_image_views.image_list, name="image_list"),
    path("<int:saved_image_id>/delete/", saved_image_views.image_delete, name="image_delete"),
]

install_patterns = [
    path("install.sh", distribution.install_script, name="script"),
    path("loam-agent.tar.gz", distribution.agent_source, name="archive"),
]

internal_patterns = [
    path("host-service-auth/", views.host_service_auth, name="host_service_auth"),
    path("host-service-starting/", views.host_service_starting, name="host_service_starting"),
]

urlpatterns = [
    path("agent/", include((install_patterns, "agent_install"))),
    path("internal/", include((internal_patterns, "agents_internal"))),
    path("ops/agents/", include((operator_patterns, "agents_ops"))),
    path("instances/", include((tenant_patterns, "agents"))),
    path("images/", include((image_patterns, "saved_images"))),
]
