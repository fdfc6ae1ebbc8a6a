from django.urls import path

from apps.quotas import views

app_name = "quotas"
urlpatterns = [
    path("org/quotas/", views.quota_overview, name="overview"),
]
