"""The agent API, mounted at /api/v1/agent/ (docs/agent-protocol.md)."""

from django.urls import path

from apps.agents import api, image_copies_api

app_name = "agent_api"
urlpatterns = [
    path("enrol", api.EnrolView.as_view(), name="enrol"),
    path("heartbeat", api.HeartbeatView.as_view(), name="heartbeat"),
    path("hosts", api.HostsView.as_view(), name="hosts"),
    path("hosts/report", api.HostReportView.as_view(), name="host_report"),
    path(
        "saved-images/<slug:code>/archive",
        image_copies_api.ArchiveView.as_view(),
        name="saved_image_archive",
    ),
    path(
        "saved-images/<slug:code>/copied",
        image_copies_api.CopiedView.as_view(),
        name="saved_image_copied",
    ),
]
