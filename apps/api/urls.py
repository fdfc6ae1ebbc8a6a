from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from apps.api.views import (
    billing,
    catalog,
    networking,
    operators,
    orders,
    sharedfs,
    storage,
    tasks,
)
from apps.api.views import tenants as views
from apps.api.views.webhooks import WebhookEndpointViewSet

router = SimpleRouter()
router.register("regions", catalog.RegionViewSet, basename="region")
router.register("accelerator-models", catalog.AcceleratorModelViewSet, basename="accelerator-model")
router.register("flavors", catalog.FlavorViewSet, basename="flavor")
router.register("images", catalog.ImageViewSet, basename="image")
router.register("prices", catalog.PriceViewSet, basename="price")
router.register("orders", orders.OrderViewSet, basename="order")
router.register("instances", orders.InstanceViewSet, basename="instance")
router.register("security-groups", networking.SecurityGroupViewSet, basename="security-group")
router.register("volumes", storage.VolumeViewSet, basename="volume")
router.register("invoices", billing.InvoiceViewSet, basename="invoice")
router.register("tasks", tasks.TaskViewSet, basename="task")
router.register("usage", billing.UsageRecordViewSet, basename="usage-record")
router.register("members", views.MembershipViewSet, basename="membership")
router.register("api-keys", views.ApiKeyViewSet, basename="api-key")
router.register("webhooks", WebhookEndpointViewSet, basename="webhook")
router.register(
    "shared-file-systems", sharedfs.SharedFileSystemViewSet, basename="shared-file-system"
)
router.register(
    "operator/organizations",
    operators.OperatorOrganizationViewSet,
    basename="operator-organization",
)
router.register("operator/orders", operators.OperatorOrderViewSet, basename="operator-order")
router.register("operator/quotas", operators.OperatorQuotaViewSet, basename="operator-quota")

app_name = "api"
urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="swagger-ui"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    path("v1/organization/", views.OrganizationView.as_view(), name="organization"),
    path("v1/quotes/", orders.QuoteView.as_view(), name="quote"),
    path("v1/quotas/", orders.QuotaView.as_view(), name="quotas"),
    path("v1/wallet/", billing.WalletView.as_view(), name="wallet"),
    path("v1/", include(router.urls)),
]
