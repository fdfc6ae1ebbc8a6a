"""Mounted at the site root: the partner console under /partner/ (a partner organization's
members only; anyone else gets a 404) and the operators' partner page of a park under
/ops/parks/<park_id>/partners/ (that park's operators only), both in the "partners" namespace."""

from django.urls import path

from apps.partners import views

app_name = "partners"
urlpatterns = [
    path("partner/", views.console, name="console"),
    path(
        "partner/statements/<int:settlement_id>/",
        views.statement,
        name="statement",
    ),
    path("ops/parks/<int:park_id>/partners/", views.park_partners, name="park_partners"),
]
