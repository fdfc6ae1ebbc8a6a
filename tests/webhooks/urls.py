"""The portal's URLs plus the webhook routes, for the API tests (pytest.mark.urls) until
apps/api/urls.py registers `WebhookEndpointViewSet` itself; harmless afterwards."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from apps.webhooks.api import WebhookEndpointViewSet
from portal.urls import urlpatterns as portal_urlpatterns

router = SimpleRouter()
router.register("webhooks", WebhookEndpointViewSet, basename="webhook")

urlpatterns = [path("api/v1/", include((router.urls, "webhooks"))), *portal_urlpatterns]
