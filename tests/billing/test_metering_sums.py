"""A pass over many meters records, for each, exactly what measuring it alone does, to the fen.

On PostgreSQL a pass measures in one statement the meters whose unmetered use lies within the
current month, and the others one by one (apps/billing/metering.py): here both run in one group,
in early April, against `_measure`, the rule stated once.
"""

import random
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from apps.billing import metering
from apps.billing.models import LedgerEntry, Meter, MeterKind, MonthlySpend, UsageRecord, Wallet
from tests.billing.conftest import local
from tests.factories import MeterFactory, OrganizationFactory

pytestmark = pytest.mark.django_db

UNTIL = local(2026, 4, 3, 12, 0)  # noon on 3 April, Shanghai


def meter(organization, *, hourly, opened_ago, metered_for=None, ended_ago=None, units="0"):
    """A meter opened `opened_ago` before UNTIL, measured for its first `metered_for` (what the
    passes before recorded of it), closed `ended_ago` before UNTIL if given."""
    started = UNTIL - opened_ago
    metered_for = metered_for or timedelta(0)
    seconds = int(metered_for.total_seconds())
    return MeterFactory(
        organization=organization,
        kind=MeterKind.COMPUTE,
        hourly_minor=Decimal(hourly),
        compute_units=Decimal(units),
        started_at=started,
        metered_until=started + metered_for,
        metered_seconds=seconds,
        metered_minor=metering.amount_for(Decimal(hourly), seconds),
        ended_at=None if ended_ago is None else UNTIL - ended_ago,
    )


def owed(meters) -> dict:
    """What `_measure` records for each meter, measured alone: {pk: [(from, to, seconds,
    compute unit ms, amount)], …}, and each meter's watermark after."""
    zone = timezone.get_current_timezone()
    expected = {}
    for row in Meter.objects.filter(pk__in=[m.pk for m in meters]).values_list(
        *metering.DueMeter.__slots__
    ):
        due = metering.DueMeter(*row)
        records = metering._measure(due, UNTIL, zone)
        expected[due.id] = (
            [
                (r.started_at, r.ended_at, r.seconds, r.compute_unit_milliseconds, r.amount_minor)
                for r in records
            ],
            (due.metered_until, due.metered_seconds, due.metered_minor),
        )
    return expected


def test_a_large_pass_records_what_each_meter_owes_alone_to_the_fen():
    rng = random.Random(37)
    organizations = [OrganizationFactory() for _ in range(4)]
    meters = []
    for organization in organizations:
        # Half-fen ties, which round up (half-even would give 0, 2, 2).
        for hourly in ("1", "3", "5"):
            meters.append(meter(organization, hourly=hourly, opened_ago=timedelta(minutes=30)))
        # A fraction of a second: the watermark moves, nothing is recorded yet.
        meters.append(meter(organization, hourly="2500", opened_ago=timedelta(microseconds=4e5)))
        # Closed since the last pass, and one closed and measured to its end (not due).
        meters.append(
            meter(
                organization,
                hourly="999.999999",
                opened_ago=timedelta(hours=5),
                metered_for=timedelta(hours=4, minutes=50),
                ended_ago=timedelta(minutes=7, seconds=3, microseconds=250_000),
            )
        )
        meters.append(
            meter(
                organization,
                hourly="12",
                opened_ago=timedelta(hours=2),
                metered_for=timedelta(hours=1),
                ended_ago=timedelta(hours=1),
            )
        )
        for _ in range(12):
            opened = timedelta(
                seconds=rng.randrange(60, 7 * 24 * 3600), microseconds=rng.randrange(10**6)
            )
            metered = timedelta(seconds=rng.randrange(0, int(opened.total_seconds())))
            meters.append(
                meter(
                    organization,
                    hourly=Decimal(rng.randrange(0, 10**10)) / 10**6,  # to six places
                    opened_ago=opened,
                    # Some measured into April already, some not since March: cut at midnight.
                    metered_for=metered,
                    units=Decimal(rng.randrange(0, 10**5)) / 1000,
                )
            )
    expected = owed(meters)
    balances = dict(Wallet.objects.values_list("organization_id", "balance_minor"))
    assert any(len(records) == 2 for records, _ in expected.values())  # cut at the month

    metered = metering.meter_organizations([o.pk for o in organizations], until=UNTIL)

    for pk, (records, watermark) in expected.items():
        assert (
            list(
                UsageRecord.objects.filter(meter_id=pk)
                .order_by("started_at")
                .values_list(
                    "started_at", "ended_at", "seconds", "compute_unit_milliseconds", "amount_minor"
                )
            )
            == records
        ), pk
        assert (
            Meter.objects.filter(pk=pk)
            .values_list("metered_until", "metered_seconds", "metered_minor")
            .get()
            == watermark
        ), pk
    total = sum(r[-1] for records, _ in expected.values() for r in records)
    assert total > 0
    assert metered.charged_minor == total
    assert metered.records == sum(len(records) for records, _ in expected.values())
    for organization in organizations:
        owes = sum(
            r[-1] for m in meters if m.organization_id == organization.pk for r in expected[m.pk][0]
        )
        wallet = Wallet.objects.get(organization=organization)
        assert wallet.balance_minor == balances[organization.pk] - owes
        assert LedgerEntry.objects.filter(wallet=wallet).aggregate(s=Sum("amount_minor")) == {
            "s": -owes
        }

    # Each organization's month adds up its records of that month: March's (measured one by
    # one) and April's (on PostgreSQL, in the pass's statement).
    spent = {}
    for m in meters:
        for started_at, *_rest, amount in expected[m.pk][0]:
            month = timezone.localtime(started_at).date().replace(day=1)
            spent[m.organization_id, month] = spent.get((m.organization_id, month), 0) + amount
    assert {month for _organization, month in spent} == {date(2026, 3, 1), date(2026, 4, 1)}
    assert spent_by_month() == spent

    again = metering.meter_organizations([o.pk for o in organizations], until=UNTIL)
    assert (again.charged_minor, again.records) == (0, 0)  # nothing is billed twice
    assert spent_by_month() == spent


def spent_by_month() -> dict:
    return {
        (organization_id, month): amount
        for organization_id, month, amount in MonthlySpend.objects.values_list(
            "organization_id", "month", "amount_minor"
        )
    }


def test_the_burn_rate_counts_every_open_meter_of_a_pass(monkeypatch):
    """The balance is judged against the open meters' hourly rates, whichever way each was
    measured: a wallet with less than an hour of them left is warned about."""
    organization = OrganizationFactory(wallet=3000)
    meter(organization, hourly="2000", opened_ago=timedelta(minutes=10))
    # Not measured since March: measured one by one, cut at the month.
    meter(organization, hourly="1000.5", opened_ago=timedelta(days=3))
    judged = []

    def needs_enforcing(wallet, *, burn_rate):
        judged.append(burn_rate)
        return False

    monkeypatch.setattr("apps.billing.services.balance_needs_enforcing", needs_enforcing)
    metering.meter_organizations([organization.pk], until=UNTIL)
    assert judged == [Decimal("3000.5")]
