from django.urls import path

from apps.operations import views

app_name = "operations"
# Objects other than an organization, a park or an order (an instance, a node, a flavor …) are
# named in the POST body of their list's page, and looked up within the operator's parks.
urlpatterns = [
    path("", views.overview, name="overview"),
    path("verifications/", views.verification_queue, name="verification_queue"),
    path("organizations/", views.organization_list, name="organization_list"),
    path(
        "organizations/<int:organization_id>/",
        views.organization_detail,
        name="organization_detail",
    ),
    path(
        "organizations/<int:organization_id>/licence/",
        views.organization_licence,
        name="organization_licence",
    ),
    path(
        "organizations/<int:organization_id>/quotas/",
        views.organization_quotas,
        name="organization_quotas",
    ),
    path("audit/", views.audit_log, name="audit_log"),
    path("orders/", views.order_approvals, name="order_approvals"),
    path("orders/<int:order_id>/decision/", views.order_decision, name="order_decision"),
    path("instances/", views.instance_list, name="instance_list"),
    path("parks/<int:park_id>/security/", views.park_security, name="park_security"),
    path("parks/<int:park_id>/approval-policy/", views.approval_policy, name="approval_policy"),
    path("parks/<int:park_id>/idle/", views.idle_capacity, name="idle_capacity"),
    path("parks/<int:park_id>/catalog/", views.catalog_flavors, name="catalog_flavors"),
    path("parks/<int:park_id>/catalog/images/", views.catalog_images, name="catalog_images"),
    path("parks/<int:park_id>/catalog/prices/", views.catalog_prices, name="catalog_prices"),
    path("parks/<int:park_id>/backends/", views.backend_list, name="backend_list"),
    path("parks/<int:park_id>/pools/", views.pool_list, name="pool_list"),
    path("parks/<int:park_id>/nodes/", views.node_list, name="node_list"),
]
