"""Endpoint URLs a delivery cannot be sent to: refused when registered, and failed (not left
pending, retried by the sweep for ever) when such a URL is already stored."""

import pytest

from apps.webhooks import tasks
from apps.webhooks.models import DeliveryState
from tests.factories import WebhookDeliveryFactory, WebhookEndpointFactory

pytestmark = pytest.mark.django_db


def test_a_stored_url_with_a_port_out_of_range_fails_its_delivery_with_the_reason():
    """URLValidator takes any five digits as a port; such a row, written before validate_url
    checked the range, made `deliver` raise and left the delivery pending."""
    endpoint = WebhookEndpointFactory(url="https://partner.example.com:99999/hooks")
    delivery = WebhookDeliveryFactory(endpoint=endpoint, state=DeliveryState.PENDING)

    tasks.deliver(delivery.pk)

    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.attempts == 0
    assert delivery.last_error == "https://partner.example.com:99999/hooks has no valid port."
