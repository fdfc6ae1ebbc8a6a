from django.urls import path

from apps.billing import views

app_name = "billing"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("top-up/", views.top_up, name="top_up"),
    path("invoices/<int:invoice_id>/", views.invoice_detail, name="invoice_detail"),
    path("stripe/webhook/", views.stripe_webhook, name="stripe_webhook"),
    path("ops/", views.park_billing, name="ops_overview"),
    path(
        "ops/organizations/<int:organization_id>/",
        views.organization_billing,
        name="ops_organization",
    ),
    path("ops/invoices/<int:invoice_id>/", views.operator_invoice, name="ops_invoice"),
]
