from django.urls import path

from apps.operations import views

app_name = "operations"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("verifications/", views.verification_queue, name="verification_queue"),
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
    path("audit/", views.audit_log, name="audit_log"),
    path("parks/<int:park_id>/security/", views.park_security, name="park_security"),
    path("parks/<int:park_id>/approval-policy/", views.approval_policy, name="approval_policy"),
    path("orders/", views.order_approvals, name="order_approvals"),
    path("orders/<int:order_id>/decision/", views.order_decision, name="order_decision"),
]
