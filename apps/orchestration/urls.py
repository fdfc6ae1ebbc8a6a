"""Mounted at /tasks/: the tenant's training task pages (namespace "tasks") and, under ops/,
the back office's scheduling pages (namespace "tasks_ops", for a park's operators only)."""

from django.urls import include, path

from apps.orchestration import views

tenant_patterns = [
    path("", views.task_list, name="task_list"),
    path("new/", views.task_create, name="task_create"),
    path("<int:task_id>/", views.task_detail, name="task_detail"),
    path("<int:task_id>/cancel/", views.task_cancel, name="task_cancel"),
]

operator_patterns = [
    path("policy/<int:park_id>/", views.scheduling_policy, name="scheduling_policy"),
    path("decisions/<int:placement_id>/", views.decision_detail, name="decision_detail"),
]

urlpatterns = [
    path("", include((tenant_patterns, "tasks"))),
    path("ops/", include((operator_patterns, "tasks_ops"))),
]
