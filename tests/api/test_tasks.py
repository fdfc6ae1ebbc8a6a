from datetime import timedelta

import pytest
from django.utils import timezone

from apps.api.models import IdempotencyRecord
from apps.api.tasks import purge_idempotency_records
from tests.factories import IdempotencyRecordFactory

pytestmark = pytest.mark.django_db


def test_purge_forgets_keys_older_than_a_day_only():
    old, fresh = IdempotencyRecordFactory(), IdempotencyRecordFactory()
    IdempotencyRecord.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    assert purge_idempotency_records() == 1
    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [fresh.pk]
