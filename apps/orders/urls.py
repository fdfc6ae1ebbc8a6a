from django.urls import path

from apps.orders import views

app_name = "orders"
urlpatterns = [
    path("instances/", views.instance_list, name="instance_list"),
    path("instances/new/", views.instance_create, name="instance_create"),
    path("instances/quote/", views.instance_quote, name="instance_quote"),
    path("instances/<int:instance_id>/", views.instance_detail, name="instance_detail"),
    path(
        "instances/<int:instance_id>/actions/<slug:kind>/",
        views.instance_operation,
        name="instance_operation",
    ),
    path("orders/", views.order_list, name="order_list"),
    path("orders/<int:order_id>/cancel/", views.order_cancel, name="order_cancel"),
]
