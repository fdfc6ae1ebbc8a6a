from celery import shared_task
from django.utils import timezone

from apps.api.idempotency import KEPT_FOR
from apps.api.models import IdempotencyRecord


@shared_task
def purge_idempotency_records() -> int:
    """Forget Idempotency-Keys older than 24 hours (celery beat runs this hourly)."""
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=timezone.now() - KEPT_FOR).delete()
    return deleted
