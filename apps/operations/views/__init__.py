"""The operator back office (/ops/): one module per part. Every page is for operators only
(`operator_view`), shows only the parks they operate, and answers 404 for another park's
object; every change is a service call (the same the operator API makes, where it has one)."""

from apps.operations.views.catalog import catalog_flavors, catalog_images, catalog_prices
from apps.operations.views.dashboard import overview
from apps.operations.views.infrastructure import backend_list, idle_capacity, node_list, pool_list
from apps.operations.views.orders import instance_list, order_approvals, order_decision
from apps.operations.views.policies import approval_policy, audit_log, park_security
from apps.operations.views.tenants import (
    organization_detail,
    organization_licence,
    organization_list,
    organization_quotas,
    verification_queue,
)

__all__ = [
    "approval_policy",
    "audit_log",
    "backend_list",
    "catalog_flavors",
    "catalog_images",
    "catalog_prices",
    "idle_capacity",
    "instance_list",
    "node_list",
    "order_approvals",
    "order_decision",
    "organization_detail",
    "organization_licence",
    "organization_list",
    "organization_quotas",
    "overview",
    "park_security",
    "pool_list",
    "verification_queue",
]
