from django.contrib import admin
from django.urls import include, path

from apps.catalog import views as catalog_views
from apps.core.views import healthz
from portal import views

handler404 = "apps.core.views.not_found"
handler500 = "apps.core.views.server_error"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("catalog/", include("apps.catalog.urls")),
    path("pricing/", catalog_views.pricing, name="pricing"),
    # The back office lives under /ops/: the operations console here, and the scheduling
    # (/ops/tasks/) and billing (/ops/billing/) pages from their apps' URLconfs, which are
    # mounted at the root because each also serves tenant pages (/tasks/, /billing/) and the
    # redirects from the back office's old paths (/tasks/ops/…, /billing/ops/…).
    path("ops/", include("apps.operations.urls")),
    path("", include("apps.orchestration.urls")),
    path("", include("apps.billing.urls")),
    # The host agents' API (docs/agent-protocol.md), before the partner API's routes.
    path("api/v1/agent/", include("apps.agents.api_urls")),
    # The organization's saved images (the agents app's, above the partner API's app).
    path("api/v1/saved-images/", include("apps.agents.saved_images_api_urls")),
    path("api/", include("apps.api.urls")),
    path("", include("apps.tenants.urls")),
    path("", include("apps.orders.urls")),
    path("", include("apps.agents.urls")),
    path("", include("apps.quotas.urls")),
    path("", include("apps.sharedfs.urls")),
    path("", include("apps.partners.urls")),
    path(
        "",
        include(
            (
                [
                    path("", views.home, name="home"),
                    path("start/", views.start, name="start"),
                    path("terms/", views.terms, name="terms"),
                ],
                "portal",
            )
        ),
    ),
]
