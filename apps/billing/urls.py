"""Mounted at the site root: the tenant's billing pages under /billing/ and the back office's
billing pages under /ops/billing/, both in the namespace "billing". The back office's pages
used to live under /billing/ops/; those paths answer a permanent redirect to the new ones."""

from django.urls import include, path
from django.views.generic import RedirectView

from apps.billing import transfer_views, views

app_name = "billing"

tenant_patterns = [
    path("", views.overview, name="overview"),
    path("top-up/", views.top_up, name="top_up"),
    path("invoices/<int:invoice_id>/", views.invoice_detail, name="invoice_detail"),
    path("stripe/webhook/", views.stripe_webhook, name="stripe_webhook"),
    path("bank-transfers/", transfer_views.bank_transfers, name="bank_transfers"),
    path("vat-invoices/", transfer_views.vat_invoices, name="vat_invoices"),
]

operator_patterns = [
    path("", views.park_billing, name="ops_overview"),
    path(
        "organizations/<int:organization_id>/",
        views.organization_billing,
        name="ops_organization",
    ),
    path("invoices/<int:invoice_id>/", views.operator_invoice, name="ops_invoice"),
    path("receivables/", transfer_views.receivables, name="ops_receivables"),
]


def moved(pattern_name):
    """301 to the route's new path, with the same arguments and query string."""
    return RedirectView.as_view(pattern_name=pattern_name, permanent=True, query_string=True)


# Unnamed, so nothing reverses to them (and the URLconf-driven isolation test skips them).
legacy_operator_patterns = [
    path("", moved("billing:ops_overview")),
    path("organizations/<int:organization_id>/", moved("billing:ops_organization")),
    path("invoices/<int:invoice_id>/", moved("billing:ops_invoice")),
]

urlpatterns = [
    path("billing/", include(tenant_patterns)),
    path("ops/billing/", include(operator_patterns)),
    path("billing/ops/", include(legacy_operator_patterns)),
]
