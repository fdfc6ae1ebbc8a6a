"""The POST of one webhook delivery. Retries are scheduled by `services.record_attempt`, which
re-dispatches this task with a countdown (see the services module for why not `retry()`)."""

import json
import time
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from apps.webhooks import services, transport
from apps.webhooks.models import DeliveryState, WebhookDelivery

USER_AGENT = "Loam-Webhooks/1"


def body_of(delivery: WebhookDelivery) -> bytes:
    """The exact bytes that are signed and sent."""
    return json.dumps(delivery.payload, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


@shared_task
def deliver(delivery_id: int) -> None:
    """POST one pending delivery and record the outcome. It may run late or twice: a delivery
    that is no longer pending is left alone, and only the first outcome of an attempt counts."""
    delivery = (
        WebhookDelivery.objects.select_related("endpoint")
        .filter(pk=delivery_id, state=DeliveryState.PENDING)
        .first()
    )
    if delivery is None:
        return
    endpoint = delivery.endpoint
    if not endpoint.is_active:
        services.fail_delivery(delivery_id=delivery.pk, error="The endpoint was turned off.")
        return
    body = body_of(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        services.SIGNATURE_HEADER: services.signature_header(
            endpoint.secret, int(time.time()), body
        ),
        services.EVENT_HEADER: delivery.event_type,
        services.DELIVERY_HEADER: str(delivery.pk),
    }
    try:
        status_code, error = transport.post(endpoint.url, body=body, headers=headers)
    except transport.DestinationRefused as refused:
        services.fail_delivery(delivery_id=delivery.pk, error=str(refused))
        return
    services.record_attempt(
        delivery_id=delivery.pk, attempt=delivery.attempts, status_code=status_code, error=error
    )


@shared_task
def reconcile_deliveries() -> int:
    """Beat, every minute: send again the pending deliveries whose attempt is overdue by more
    than LOAM_RECONCILE_AFTER_S (their job was lost); `deliver` counts only the first outcome
    of an attempt. Returns how many it sent."""
    overdue = timezone.now() - timedelta(seconds=settings.LOAM_RECONCILE_AFTER_S)
    lost = list(
        WebhookDelivery.objects.filter(
            state=DeliveryState.PENDING, next_attempt_at__lt=overdue
        ).values_list("pk", flat=True)
    )
    for delivery_id in lost:
        deliver.delay(delivery_id)
    return len(lost)
