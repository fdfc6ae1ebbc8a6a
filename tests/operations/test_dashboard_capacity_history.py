"""The overview's capacity history at scale: samples older than a day rolled up to one per pool
and hour, charts of long periods drawn by the hour and cached until the next sample, and the
overview's queries the same however many samples and pools there are."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.operations.selectors.dashboard import capacity_chart, capacity_series
from apps.orchestration.capacity import roll_up_samples
from apps.orchestration.models import CapacitySample
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def write_samples(pool, *, first, last, every=timedelta(minutes=5), watts=lambda at: 1000):
    """A sample of `pool` every `every` from `first` to `last` (included), 10 accelerators of
    which 4 allocated."""
    samples, at = [], first
    while at <= last:
        samples.append(
            CapacitySample(
                park=pool.backend.park,
                pool=pool,
                taken_at=at,
                accelerators_total=10,
                accelerators_allocated=4,
                accelerators_idle=1,
                watts=watts(at),
            )
        )
        at += every
    CapacitySample.objects.bulk_create(samples)
    return samples


def test_samples_older_than_a_day_become_one_per_pool_and_hour(park):
    pool, other = PoolFactory(backend__park=park), PoolFactory(backend__park=park)
    first = NOW - timedelta(hours=27)
    # 1 kW for the first 30 minutes of each hour, 3 kW for the rest: a mean of 2 kW.
    for p in (pool, other):
        write_samples(p, first=first, last=NOW, watts=lambda at: 1000 if at.minute < 30 else 3000)
    energy_before = capacity_series([park], since=first)["energy_kwh"]

    assert roll_up_samples(now=NOW) == 2 * 3  # 3 whole hours before the last 24, per pool

    older = CapacitySample.objects.filter(pool=pool, taken_at__lt=NOW - timedelta(hours=24))
    assert [s.taken_at for s in older.order_by("taken_at")] == [
        first,
        first + timedelta(hours=1),
        first + timedelta(hours=2),
    ]
    assert {(s.watts, s.accelerators_allocated, s.accelerators_total) for s in older} == {
        (2000, 4, 10)
    }
    recent = CapacitySample.objects.filter(pool=pool, taken_at__gte=NOW - timedelta(hours=24))
    assert recent.count() == 24 * 12 + 1  # the last day keeps every sample
    assert capacity_series([park], since=first)["energy_kwh"] == energy_before

    assert roll_up_samples(now=NOW) == 0  # nothing left to roll up
    assert roll_up_samples(now=NOW + timedelta(hours=1)) == 2  # the next hour, per pool


def test_a_30_day_chart_has_a_point_per_hour(park):
    pool = PoolFactory(backend__park=park)
    write_samples(pool, first=NOW - timedelta(days=2), last=NOW)
    series = capacity_series([park], since=NOW - timedelta(days=30), hourly=True)
    assert series["points"] == 2 * 24 + 1
    assert series["allocated_pct"][0] == 40.0
    assert series["power_kw"][0] == 1.0


def test_the_chart_is_cached_until_the_next_sample(park):
    pool = PoolFactory(backend__park=park)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    write_samples(pool, first=now - timedelta(hours=2), last=now - timedelta(minutes=5))
    first = capacity_chart([park], period=timedelta(hours=24))

    with CaptureQueriesContext(connection) as cached:
        assert capacity_chart([park], period=timedelta(hours=24)) == first
    assert len(cached) == 1  # which sample is the newest, nothing more

    write_samples(pool, first=now, last=now, watts=lambda at: 5000)
    fresh = capacity_chart([park], period=timedelta(hours=24))
    assert fresh["points"] == first["points"] + 1
    assert fresh["power_kw"][-1] == 5.0


def test_overview_queries_do_not_grow_with_samples_or_pools(client, park, operator):
    client.force_login(operator)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    write_samples(PoolFactory(backend__park=park), first=now - timedelta(hours=6), last=now)
    client.get("/ops/?period=30d")  # warm: sessions, content types
    cache.clear()  # both renders below read the chart from the database
    with CaptureQueriesContext(connection) as few:
        assert client.get("/ops/?period=30d").status_code == 200

    for _ in range(5):
        write_samples(PoolFactory(backend__park=park), first=now - timedelta(days=3), last=now)
    cache.clear()
    with CaptureQueriesContext(connection) as many:
        response = client.get("/ops/?period=30d")
    assert response.status_code == 200
    assert len(many) == len(few)
    assert response.context["series"]["points"] == 3 * 24 + 1
