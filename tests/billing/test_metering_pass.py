"""A metering pass at scale: a fixed number of queries however many meters, groups of
organizations per transaction, a failure confined to its organization, overlapping passes
that never bill a second twice, and a pass that says when it falls behind.

MeterFactory's meters cost ¥25.00 an hour (2500 fen): an hour is 2500, a minute 42 (41.67).
"""

import logging
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing import metering, services
from apps.billing.models import EntryKind, LedgerEntry, Meter, UsageRecord, Wallet
from apps.billing.tasks import meter_usage
from tests.factories import FUNDED_BALANCE_MINOR, MeterFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


def organizations_with_meters(count: int, *, meters_each: int = 1) -> list:
    organizations = [OrganizationFactory() for _ in range(count)]
    for organization in organizations:
        for _ in range(meters_each):
            MeterFactory(organization=organization, started_at=timezone.now())
    return organizations


def queries_of_a_pass() -> int:
    with CaptureQueriesContext(connection) as queries:
        meter_usage()
    return len(queries)


def test_a_pass_makes_as_many_queries_for_fifty_hosts_as_for_five(clock):
    organizations_with_meters(5)
    clock.shift(60)
    five = queries_of_a_pass()
    assert UsageRecord.objects.count() == 5
    organizations_with_meters(45)
    clock.shift(60)
    fifty = queries_of_a_pass()
    assert UsageRecord.objects.count() == 50  # the first five's records of the day extended
    assert fifty == five


def test_a_pass_bigger_than_a_transaction_adds_only_its_groups_queries(clock, monkeypatch):
    monkeypatch.setattr(metering, "METERS_PER_TRANSACTION", 10)
    organizations_with_meters(5, meters_each=2)  # one group
    clock.shift(60)
    one_group = queries_of_a_pass()
    organizations_with_meters(5, meters_each=2)  # a second group
    clock.shift(60)
    two_groups = queries_of_a_pass()
    clock.shift(60)
    assert queries_of_a_pass() == two_groups
    assert 0 < two_groups - one_group < one_group


def test_groups_keep_each_organization_whole_and_in_order(clock):
    small, large, last = organizations_with_meters(3, meters_each=2)
    MeterFactory.create_batch(3, organization=large, started_at=timezone.now())
    assert metering.organization_groups_due(meters_per_group=4) == [
        [small.pk],
        [large.pk],  # 5 meters: more than a group holds, never split
        [last.pk],
    ]
    assert metering.organization_groups_due(meters_per_group=100) == [[small.pk, large.pk, last.pk]]


def test_metering_in_groups_charges_each_organization_exactly_once(clock, monkeypatch):
    """Seven organizations of 1 to 7 meters, metered in groups of about five meters, for an
    hour and then 61 seconds: each meter measured once per pass (into its record of the day),
    each wallet charged once per pass with its ledger entry, to the fen."""
    monkeypatch.setattr(metering, "METERS_PER_TRANSACTION", 5)
    organizations = [OrganizationFactory() for _ in range(7)]
    for count, organization in enumerate(organizations, 1):
        MeterFactory.create_batch(count, organization=organization, started_at=timezone.now())
    clock.shift(3600)
    assert meter_usage() == 28 * 2500
    clock.shift(61)
    assert meter_usage() == 28 * 42  # 3661 s are 2542.36 -> 2542: 42 more each
    for count, organization in enumerate(organizations, 1):
        entries = LedgerEntry.objects.filter(wallet__organization=organization).order_by("pk")
        assert [e.amount_minor for e in entries] == [-count * 2500, -count * 42]
        wallet = Wallet.objects.get(organization=organization)
        assert wallet.balance_minor == FUNDED_BALANCE_MINOR - count * 2542
        assert entries.last().balance_after_minor == wallet.balance_minor
    for meter in Meter.objects.all():
        assert (meter.metered_until, meter.metered_seconds, meter.metered_minor) == (
            timezone.now(),
            3661,
            2542,
        )
        assert list(meter.records.values_list("seconds", "amount_minor")) == [(3661, 2542)]


def test_a_failing_organization_stops_only_itself_in_its_group(clock, monkeypatch, caplog):
    first, broken, last = organizations_with_meters(3)
    clock.shift(3600)
    real_charge = services.charge_wallets

    def charge_wallets(wallets, **amounts):
        # After the group's meters are measured and recorded: all of it must roll back.
        if any(wallet.organization_id == broken.pk for wallet in wallets):
            raise RuntimeError("a bad row in one organization")
        return real_charge(wallets, **amounts)

    monkeypatch.setattr(services, "charge_wallets", charge_wallets)
    with caplog.at_level(logging.ERROR, logger="apps.billing.tasks"):
        assert meter_usage() == 2 * 2500
    assert f"metering organization {broken.pk} failed" in caplog.text
    assert set(UsageRecord.objects.values_list("organization_id", flat=True)) == {
        first.pk,
        last.pk,
    }
    assert not LedgerEntry.objects.filter(wallet__organization=broken).exists()
    monkeypatch.setattr(services, "charge_wallets", real_charge)
    assert meter_usage() == 2500  # the next pass catches up, the others owe nothing more
    assert UsageRecord.objects.filter(organization=broken).get().seconds == 3600


def test_a_pass_warns_when_usage_went_unmetered_for_two_intervals(clock, settings, caplog):
    settings.LOAM_METERING_INTERVAL_S = 60
    organizations_with_meters(1)
    clock.shift(120)
    with caplog.at_level(logging.WARNING, logger="apps.billing.tasks"):
        meter_usage()
    assert "metering is behind" not in caplog.text  # two intervals: on time
    clock.shift(121)
    with caplog.at_level(logging.WARNING, logger="apps.billing.tasks"):
        meter_usage()
    assert "metering is behind: usage since 121 s ago is not metered yet" in caplog.text


def test_a_pass_longer_than_its_interval_warns(clock, settings, caplog, monkeypatch):
    settings.LOAM_METERING_INTERVAL_S = 60
    organizations_with_meters(1)
    clock.shift(60)
    seconds = iter([1000.0, 1061.5])  # the pass starts, and ends 61.5 s later
    monkeypatch.setattr("apps.billing.tasks.monotonic", lambda: next(seconds))
    with caplog.at_level(logging.WARNING, logger="apps.billing.tasks"):
        meter_usage()
    assert "metering took 61.5 s, longer than its 60 s interval" in caplog.text


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_overlapping_passes_never_bill_a_second_twice():
    """Four passes started together over forty organizations, on their own connections: the
    row locks make them take turns per group, and whichever meters a group first leaves the
    others nothing to record."""
    started = timezone.now() - timedelta(hours=1)
    organizations = [OrganizationFactory() for _ in range(40)]
    for organization in organizations:
        MeterFactory.create_batch(2, organization=organization, started_at=started)
    until = timezone.now()
    start, charged, errors = threading.Barrier(4), [], []

    def one_pass():
        try:
            start.wait(10)
            for group in metering.organization_groups_due(meters_per_group=10):
                charged.append(metering.meter_organizations(group, until=until).charged_minor)
        except Exception as exc:  # reported by the assertion below, from the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one_pass) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    seconds = int((until - started).total_seconds())
    owed = metering.amount_for(Decimal(2500), seconds)
    assert sum(charged) == 80 * owed
    for meter in Meter.objects.all():
        assert list(meter.records.values_list("seconds", "amount_minor")) == [(seconds, owed)]
    for organization in organizations:
        entries = LedgerEntry.objects.filter(wallet__organization=organization)
        assert list(entries.values_list("kind", "amount_minor")) == [(EntryKind.CHARGE, -2 * owed)]
    assert LedgerEntry.objects.aggregate(total=Sum("amount_minor"))["total"] == -80 * owed
