from django import template

from apps.operations import audit_labels
from apps.orchestration.models import TaskPreference
from apps.quotas.selectors import resource_label
from apps.tenants.selectors import parks_operated_by

register = template.Library()

# url name (of the operations, agents_ops, tasks_ops and billing namespaces) -> the section of
# the sub-navigation it belongs to
SECTIONS = {
    "overview": "overview",
    "organization_list": "tenants",
    "organization_detail": "tenants",
    "organization_quotas": "tenants",
    "verification_queue": "verifications",
    "order_approvals": "orders",
    "instance_list": "instances",
    "idle_capacity": "idle",
    "catalog_flavors": "catalog",
    "catalog_images": "catalog",
    "catalog_prices": "catalog",
    "backend_list": "infrastructure",
    "pool_list": "infrastructure",
    "node_list": "infrastructure",
    "server_list": "infrastructure",
    "token_list": "infrastructure",
    "audit_log": "audit",
    "park_security": "policies",
    "approval_policy": "policies",
    "scheduling_policy": "policies",
    "decision_detail": "policies",
    "ops_overview": "billing",
    "ops_organization": "billing",
    "ops_invoice": "billing",
    "ops_receivables": "receivables",
}


@register.inclusion_tag("operations/partials/_subnav.html", takes_context=True)
def ops_subnav(context):
    """The back office's own navigation. Park pages (catalog, backends, idle capacity, policies)
    link to the park being viewed, else the operator's first park; a switcher lists the others."""
    request = context["request"]
    match = request.resolver_match
    parks = list(parks_operated_by(request.user).order_by("name", "pk"))
    park_id = (match.kwargs.get("park_id") if match else None) or None
    current = next((p for p in parks if p.pk == park_id), parks[0] if parks else None)
    url_name = match.url_name if match else ""
    return {
        "request": request,
        "parks": parks,
        "park": current,
        "section": SECTIONS.get(url_name, ""),
        # The park switcher links each park's page of the same view (an app's own back-office
        # pages, e.g. the host agents', live outside the operations namespace).
        "url_name": match.view_name if park_id else "",
    }


@register.filter
def mean_utilization(telemetry) -> float | None:
    """The mean utilization (%) of a node's accelerators in its last telemetry, or None."""
    readings = [
        reading.get("util")
        for reading in ((telemetry or {}).get("accelerators") or {}).values()
        if isinstance(reading, dict) and reading.get("util") is not None
    ]
    return round(sum(readings) / len(readings), 1) if readings else None


@register.filter
def audit_action(code: str) -> str:
    """An audit action code as people read it (`task.succeeded` -> "Training task: Succeeded")."""
    return audit_labels.action_label(code)


@register.filter
def audit_actor(label: str) -> str:
    """An audit actor label as people read it (`system:scheduler` -> "System · scheduler")."""
    return audit_labels.actor_label(label)


@register.filter
def object_type(label: str) -> str:
    """A model label (`orders.instance`) as its verbose name."""
    return audit_labels.object_type_label(label)


@register.filter
def preference_label(value: str) -> str:
    """A task preference code (`balanced`) as its label; an unknown one as it is."""
    return TaskPreference(value).label if value in TaskPreference.values else value


@register.filter
def quota_resource(value: str) -> str:
    """A quota resource code (`monthly_spend`) as its label."""
    return resource_label(value)
