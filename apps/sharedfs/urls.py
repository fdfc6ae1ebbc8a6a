from django.urls import path

from apps.sharedfs import views

app_name = "sharedfs"
urlpatterns = [
    path("org/shared-storage/", views.overview, name="overview"),
    path("ops/parks/<int:park_id>/shared-storage/", views.park_overview, name="park_overview"),
]
