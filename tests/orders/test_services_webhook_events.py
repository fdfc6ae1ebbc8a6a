"""Order and instance state changes reach the organization's subscribed webhooks."""

import pytest

from apps.orders.models import InstanceState
from apps.orders.operations import request_operation
from apps.orders.services import submit_create
from apps.webhooks.models import WebhookDelivery
from tests.factories import WebhookEndpointFactory
from tests.worlds import sellable_world

pytestmark = pytest.mark.django_db


def test_a_host_ordered_and_released_is_told_to_the_subscribed_endpoint(
    django_capture_on_commit_callbacks, settings
):
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 0
    world = sellable_world()
    subscribed = WebhookEndpointFactory(
        organization=world.organization,
        event_types=["order.submitted", "order.done", "instance.running", "instance.released"],
    )
    WebhookEndpointFactory(organization=world.organization, event_types=["invoice.issued"])
    with django_capture_on_commit_callbacks(execute=True):
        [order] = submit_create(
            organization=world.organization, actor=world.owner, request=world.request
        )
    instance = order.instance
    instance.refresh_from_db()
    assert instance.state == InstanceState.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        request_operation(instance=instance, actor=world.owner, kind="release")

    deliveries = WebhookDelivery.objects.filter(endpoint=subscribed)
    types = sorted(deliveries.values_list("event_type", flat=True))
    assert types == sorted(
        [
            "order.submitted",
            "order.done",
            "instance.running",  # the create
            "order.submitted",
            "order.done",
            "instance.released",
        ]  # the release
    )
    running = deliveries.get(event_type="instance.running")
    assert running.payload["data"]["instance"] == instance.pk
    assert running.payload["data"]["access"]["address"]
    assert not WebhookDelivery.objects.exclude(endpoint=subscribed).exists()
