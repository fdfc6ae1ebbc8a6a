from django.contrib import admin
from django.urls import include, path

from apps.core.views import healthz
from portal import views

handler404 = "apps.core.views.not_found"
handler500 = "apps.core.views.server_error"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("catalog/", include("apps.catalog.urls")),
    path("ops/", include("apps.operations.urls")),
    path("tasks/", include("apps.orchestration.urls")),
    path("billing/", include("apps.billing.urls")),
    path("api/", include("apps.api.urls")),
    path("", include("apps.tenants.urls")),
    path("", include("apps.orders.urls")),
    path("", include("apps.quotas.urls")),
    path(
        "",
        include(
            (
                [path("", views.home, name="home"), path("start/", views.start, name="start")],
                "portal",
            )
        ),
    ),
]
