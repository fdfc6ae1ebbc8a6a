"""Reads of webhook endpoints and their delivery logs, always through the owning organization."""

from django.db import connections, router
from django.db.models import QuerySet
from django.http import Http404

from apps.core import sql
from apps.tenants.models import Organization
from apps.tenants.selectors import for_organization
from apps.webhooks.models import WebhookDelivery, WebhookEndpoint


def endpoints_for(organization: Organization) -> QuerySet:
    return for_organization(WebhookEndpoint, organization).order_by("-created_at", "-id")


def deliveries_for(endpoint: WebhookEndpoint) -> QuerySet:
    """The endpoint's delivery log, newest first."""
    return WebhookDelivery.objects.filter(endpoint=endpoint).order_by("-created_at", "-id")


def get_delivery(endpoint: WebhookEndpoint, delivery_id) -> WebhookDelivery:
    """One delivery of an endpoint already read through its organization, or 404."""
    try:
        return deliveries_for(endpoint).select_related("endpoint__organization").get(pk=delivery_id)
    except (WebhookDelivery.DoesNotExist, ValueError):
        raise Http404 from None


_ACTIVE_ENDPOINTS_SQL = """
SELECT endpoint.id, endpoint.organization_id, endpoint.event_types
FROM "webhooks_webhookendpoint" endpoint
WHERE endpoint.organization_id IN ({organizations}) AND endpoint.is_active
ORDER BY endpoint.id
"""


def active_endpoints(organization_ids) -> list[tuple[int, int, list[str]]]:
    """(endpoint id, organization id, the event types it subscribes to) for each active endpoint
    of the organizations, in id order. Written out: read on every order (its events), where
    the ORM took several times the statement's CPU."""
    members, params = sql.members(list(organization_ids))
    event_types = WebhookEndpoint._meta.get_field("event_types")
    connection = connections[router.db_for_read(WebhookEndpoint)]
    return [
        (endpoint_id, organization_id, event_types.from_db_value(types, None, connection))
        for endpoint_id, organization_id, types in sql.fetch_all(
            WebhookEndpoint, _ACTIVE_ENDPOINTS_SQL.format(organizations=members), params
        )
    ]
