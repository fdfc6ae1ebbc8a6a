from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from apps.api import views

router = SimpleRouter()
router.register("members", views.MembershipViewSet, basename="membership")
router.register("api-keys", views.ApiKeyViewSet, basename="api-key")

app_name = "api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("v1/organization/", views.OrganizationView.as_view(), name="organization"),
    path("v1/", include(router.urls)),
]
