"""/api/v1/wallet/, /api/v1/usage/ and invoices with their lines."""

from datetime import timedelta
from decimal import Decimal

import pytest

from tests.api.conftest import assert_problem, bearer, results
from tests.factories import (
    EPOCH,
    InvoiceFactory,
    MeterFactory,
    UsageRecordFactory,
    WalletFactory,
)

pytestmark = pytest.mark.django_db


def test_wallet_shows_balance_hold_and_estimate(client, organization, read_key):
    WalletFactory(organization=organization, balance_minor=50_000, held_minor=2_000)
    MeterFactory(organization=organization, hourly_minor=Decimal(1000))

    body = client.get("/api/v1/wallet/", **bearer(read_key)).json()

    assert body["balance_minor"] == 50_000
    assert body["held_minor"] == 2_000
    assert body["available_minor"] == 48_000
    assert body["hourly_minor"] == 1000
    assert body["month_estimate_minor"] >= body["month_to_date_minor"] > 0
    assert body["low_balance"] is False


def test_wallet_needs_the_billing_view_right(client, organization, member):
    client.force_login(member)
    assert_problem(client.get("/api/v1/wallet/"), 403)


def test_usage_lists_only_this_organizations_records(
    client, organization, other_organization, read_key
):
    mine = UsageRecordFactory(organization=organization, started_at=EPOCH)
    newer = UsageRecordFactory(organization=organization, started_at=EPOCH + timedelta(hours=1))
    theirs = UsageRecordFactory(organization=other_organization)

    rows = results(client.get("/api/v1/usage/", **bearer(read_key)), count=2)

    assert [row["id"] for row in rows] == [newer.pk, mine.pk]  # newest first
    response = client.get(f"/api/v1/usage/{theirs.pk}/", **bearer(read_key))
    assert_problem(response, 404)


def test_usage_filters_by_kind_and_time(client, organization, read_key):
    UsageRecordFactory(organization=organization, started_at=EPOCH)
    later = UsageRecordFactory(organization=organization, started_at=EPOCH + timedelta(days=2))

    since = (EPOCH + timedelta(days=1)).isoformat()
    rows = results(client.get("/api/v1/usage/", {"started_at__gte": since}, **bearer(read_key)))
    assert [row["id"] for row in rows] == [later.pk]
    assert results(client.get("/api/v1/usage/", {"kind": "disk"}, **bearer(read_key))) == []


def test_invoice_carries_its_lines_and_tax_rate(client, organization, read_key):
    invoice = InvoiceFactory(organization=organization, tax_rate=Decimal("0.06"))
    invoice.lines.create(
        description="gpu-1",
        kind="compute",
        seconds=3600,
        quantity=1,
        compute_unit_milliseconds=3600_000,
        hourly_minor=10_000,
        amount_minor=10_000,
    )

    body = client.get(f"/api/v1/invoices/{invoice.pk}/", **bearer(read_key)).json()

    assert body["tax_rate"] == "0.0600"
    assert body["lines"] == [
        {
            "description": "gpu-1",
            "kind": "compute",
            "instance": None,
            "task": None,
            "quantity": 1,
            "seconds": 3600,
            "compute_unit_milliseconds": 3600_000,
            "hourly_minor": "10000.000000",
            "amount_minor": 10_000,
        }
    ]


def test_billing_and_owner_see_invoices_a_member_does_not(
    client, organization, owner, billing, member, other_organization
):
    mine = InvoiceFactory(organization=organization)
    InvoiceFactory(organization=other_organization)
    for user in (owner, billing):
        client.force_login(user)
        body = client.get("/api/v1/invoices/").json()
        assert [row["number"] for row in body["results"]] == [mine.number]
        assert client.get(f"/api/v1/invoices/{mine.pk}/").json()["total_minor"] == mine.total_minor
    client.force_login(member)
    response = client.get("/api/v1/invoices/")
    assert response.status_code == 403
    assert response["Content-Type"].startswith("application/problem+json")
