"""Many rows in few statements: what is written is exactly what was given, on PostgreSQL (COPY
and unnest) and on SQLite (Django's bulk_create and bulk_update) alike."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.billing.models import Meter, MeterKind
from apps.core.bulk import update_rows
from apps.core.models import AuditEvent
from tests.factories import AuditEventFactory, MeterFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)


def test_update_rows_writes_each_row_its_own_values_and_nothing_else():
    meters = MeterFactory.create_batch(3, started_at=T0)
    untouched = MeterFactory(started_at=T0)
    for n, meter in enumerate(meters, 1):
        meter.metered_until = T0 + timedelta(seconds=n, microseconds=n)
        meter.metered_seconds = n
        meter.metered_minor = 10 * n
        meter.hourly_minor = Decimal("0.123456") * n
        meter.ended_at = None if n == 1 else T0 + timedelta(hours=n)
        meter.kind = MeterKind.DISK  # not among the fields written
    fields = ["metered_until", "metered_seconds", "metered_minor", "hourly_minor", "ended_at"]
    assert update_rows(Meter, meters, fields) == 3
    for n, meter in enumerate(meters, 1):
        meter.refresh_from_db()
        assert (meter.metered_until, meter.metered_seconds, meter.metered_minor) == (
            T0 + timedelta(seconds=n, microseconds=n),
            n,
            10 * n,
        )
        assert meter.hourly_minor == Decimal("0.123456") * n
        assert meter.ended_at == (None if n == 1 else T0 + timedelta(hours=n))
        assert meter.kind == MeterKind.COMPUTE
    untouched.refresh_from_db()
    assert (untouched.metered_until, untouched.metered_seconds) == (T0, 0)


def test_update_rows_is_one_statement_on_postgresql():
    meters = MeterFactory.create_batch(20, started_at=T0)
    for meter in meters:
        meter.metered_seconds = 60
    with CaptureQueriesContext(connection) as queries:
        update_rows(Meter, meters, ["metered_seconds"])
    if connection.vendor == "postgresql":
        assert len(queries) == 1
    assert set(Meter.objects.values_list("metered_seconds", flat=True)) == {60}


def test_only_plain_columns_are_written_in_bulk():
    event = AuditEventFactory()
    with pytest.raises(TypeError, match="AuditEvent.data is not a plain column"):
        update_rows(AuditEvent, [event], ["data"])
