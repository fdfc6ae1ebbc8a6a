from django.urls import path

from apps.orders import network_views, views, volume_views

app_name = "orders"
urlpatterns = [
    path("instances/", views.instance_list, name="instance_list"),
    path("instances/new/", views.instance_create, name="instance_create"),
    path("instances/quote/", views.instance_quote, name="instance_quote"),
    path("instances/<int:instance_id>/", views.instance_detail, name="instance_detail"),
    path(
        "instances/<int:instance_id>/data-disk/",
        views.instance_data_disk,
        name="instance_data_disk",
    ),
    path(
        "instances/<int:instance_id>/monitoring/",
        views.instance_monitoring,
        name="instance_monitoring",
    ),
    path(
        "instances/<int:instance_id>/actions/<slug:kind>/",
        views.instance_operation,
        name="instance_operation",
    ),
    path(
        "instances/<int:instance_id>/stop-schedule/",
        views.instance_stop_schedule,
        name="instance_stop_schedule",
    ),
    path(
        "instances/<int:instance_id>/port-mappings/",
        network_views.instance_port_mappings,
        name="instance_port_mappings",
    ),
    path(
        "instances/<int:instance_id>/port-mappings/<int:mapping_id>/delete/",
        network_views.instance_port_mapping_delete,
        name="instance_port_mapping_delete",
    ),
    path(
        "instances/<int:instance_id>/security-group/",
        network_views.instance_security_group,
        name="instance_security_group",
    ),
    path("security-groups/", network_views.security_group_list, name="security_group_list"),
    path(
        "security-groups/<int:group_id>/",
        network_views.security_group_detail,
        name="security_group_detail",
    ),
    path(
        "security-groups/<int:group_id>/rules/",
        network_views.security_group_rule_add,
        name="security_group_rule_add",
    ),
    path(
        "security-groups/<int:group_id>/rules/<int:rule_id>/delete/",
        network_views.security_group_rule_delete,
        name="security_group_rule_delete",
    ),
    path(
        "security-groups/<int:group_id>/delete/",
        network_views.security_group_delete,
        name="security_group_delete",
    ),
    path("volumes/", volume_views.volume_list, name="volume_list"),
    path("volumes/<int:volume_id>/grow/", volume_views.volume_grow, name="volume_grow"),
    path("volumes/<int:volume_id>/snapshot/", volume_views.volume_snapshot, name="volume_snapshot"),
    path("volumes/<int:volume_id>/attach/", volume_views.volume_attach, name="volume_attach"),
    path("volumes/<int:volume_id>/detach/", volume_views.volume_detach, name="volume_detach"),
    path("volumes/<int:volume_id>/delete/", volume_views.volume_delete, name="volume_delete"),
    path("orders/", views.order_list, name="order_list"),
    path("orders/<int:order_id>/cancel/", views.order_cancel, name="order_cancel"),
]
