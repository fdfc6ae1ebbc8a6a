"""Reads of webhook endpoints and their delivery logs, always through the owning organization."""

from django.db.models import QuerySet
from django.http import Http404

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
