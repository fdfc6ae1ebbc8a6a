from django.urls import path

from apps.sharedfs import views

app_name = "sharedfs"
urlpatterns = [
    path("org/shared-storage/", views.overview, name="overview"),
    path("org/shared-storage/<int:file_system_id>/delete/", views.delete, name="delete"),
    path("ops/parks/<int:park_id>/shared-storage/", views.park_overview, name="park_overview"),
]
