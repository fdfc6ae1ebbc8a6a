"""Mounted at the site root: the tenant's training task pages under /tasks/ (namespace "tasks")
and the back office's scheduling pages under /ops/tasks/ (namespace "tasks_ops", for a park's
operators only). The back office's pages used to live under /tasks/ops/; those paths answer a
permanent redirect to the new ones."""

from django.urls import include, path
from django.views.generic import RedirectView

from apps.orchestration import views

tenant_patterns = [
    path("", views.task_list, name="task_list"),
    path("new/", views.task_create, name="task_create"),
    path("<int:task_id>/", views.task_detail, name="task_detail"),
    path("<int:task_id>/cancel/", views.task_cancel, name="task_cancel"),
]

operator_patterns = [
    path("policy/<int:park_id>/", views.scheduling_policy, name="scheduling_policy"),
    path("policy/<int:park_id>/shares/", views.fair_share, name="fair_share"),
    path("decisions/<int:placement_id>/", views.decision_detail, name="decision_detail"),
]


def moved(pattern_name):
    """301 to the route's new path, with the same arguments and query string."""
    return RedirectView.as_view(pattern_name=pattern_name, permanent=True, query_string=True)


# Unnamed, so nothing reverses to them (and the URLconf-driven isolation test skips them).
legacy_operator_patterns = [
    path("policy/<int:park_id>/", moved("tasks_ops:scheduling_policy")),
    path("decisions/<int:placement_id>/", moved("tasks_ops:decision_detail")),
]

urlpatterns = [
    path("tasks/", include((tenant_patterns, "tasks"))),
    path("ops/tasks/", include((operator_patterns, "tasks_ops"))),
    path("tasks/ops/", include(legacy_operator_patterns)),
]
