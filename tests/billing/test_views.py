"""The billing pages through the test client: who sees what (apps/tenants/roles.py: billing is
for owners, admins and billing members; top-ups for owners and billing members), the operator
pages, the forms' refusals (422, never 500) and the usage chart's data."""

import json
import re

import pytest
from django.urls import reverse

from apps.billing.models import BillingMode, EntryKind, Invoice, LedgerEntry, Wallet
from apps.orders.models import OrderKind
from tests.billing.conftest import local
from tests.factories import (
    FUNDED_BALANCE_MINOR,
    InvoiceFactory,
    OrganizationFactory,
    ParkOperatorFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

OVERVIEW = "/billing/"
OPS = "/ops/billing/"


def ops_organization(organization) -> str:
    return f"/ops/billing/organizations/{organization.pk}/"


def ops_invoice(invoice) -> str:
    return f"/ops/billing/invoices/{invoice.pk}/"


@pytest.fixture(autouse=True)
def english(client):
    client.cookies["django_language"] = "en"


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def other_park_operator(db):
    user = UserFactory()
    ParkOperatorFactory(user=user)
    return user


def usage_data(response) -> dict:
    match = re.search(
        r'<script id="usage-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the usage chart's data is missing"
    return json.loads(match.group(1))


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# --- The tenant's billing page --------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "status"),
    [("owner", 200), ("admin", 200), ("billing", 200), ("member", 403), ("viewer", 403)],
)
def test_who_sees_the_billing_page(as_user, organization, member_of, role, status):
    assert as_user(member_of(organization, role)).get(OVERVIEW).status_code == status


def test_anonymous_users_are_sent_to_sign_in(client):
    response = client.get(OVERVIEW)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("account_login"))


def test_users_without_an_organization_are_sent_to_create_one(as_user, db):
    response = as_user(UserFactory()).get(OVERVIEW)
    assert response.status_code == 302
    assert response["Location"] == reverse("tenants:organization_create")


def test_the_page_shows_the_wallet(as_user, owner, organization):
    Wallet.objects.filter(organization=organization).update(balance_minor=123_456, held_minor=1_000)
    page = as_user(owner).get(OVERVIEW)
    html = page.content.decode()
    assert page.context["wallet"].available_minor == 122_456
    assert "¥1,224.56" in html and "¥1,234.56" in html and "¥10.00" in html
    assert page.context["can_top_up"] is True


def test_the_top_up_form_is_only_for_those_who_may_top_up(as_user, organization, member_of):
    page = as_user(member_of(organization, "admin")).get(OVERVIEW)
    assert page.context["can_top_up"] is False
    assert reverse("billing:top_up") not in page.content.decode()
    assert "Owners and billing members can top up the wallet." in page.content.decode()


def test_top_up_is_post_only(as_user, owner):
    assert as_user(owner).get(reverse("billing:top_up")).status_code == 405


def test_the_usage_chart_has_the_last_30_days(
    clock, world, running_host, operate, meter, owner, as_user
):
    host = running_host(1, data_disk_gb=100)
    clock.shift(3600)
    operate(host, OrderKind.STOP)
    clock.move_to(local(2026, 3, 11))
    meter()
    clock.move_to(local(2026, 3, 11, 10))
    meter()
    client = as_user(owner)
    data = usage_data(client.get(OVERVIEW))
    assert len(data["x"]) == 30
    assert (data["x"][0], data["x"][-2], data["x"][-1]) == (
        "2026-02-10",
        "2026-03-10",
        "2026-03-11",
    )
    ((series),) = data["series"]
    assert series["name"] == "g1.1x"
    # 10 March: 1 h of compute (1000) and 14 h of disk (70); 11 March: 10 h of disk (50).
    assert series["data"][-2:] == [1070, 50] and sum(series["data"]) == 1120
    by_kind = usage_data(client.get(OVERVIEW, {"group": "kind"}))
    assert {s["name"]: s["data"][-2:] for s in by_kind["series"]} == {
        "Host running time": [1000, 0],
        "Cloud disk": [70, 50],
    }
    by_vendor = usage_data(client.get(OVERVIEW, {"group": "vendor"}))
    assert [s["name"] for s in by_vendor["series"]] == ["NVIDIA"]
    assert client.get(OVERVIEW, {"group": "nonsense"}).status_code == 200


def test_the_month_estimate(clock, world, running_host, meter, owner, as_user):
    """10:00 on 10 March: a host at 1000 an hour, metered for 30 minutes, running 15 more; the
    rest of March (517.25 h) at that rate."""
    running_host(1)
    clock.shift(1800)
    meter()
    clock.shift(900)
    estimate = as_user(owner).get(OVERVIEW).context["estimate"]
    assert (estimate.metered_minor, estimate.accrued_minor, estimate.hourly_minor) == (
        500,
        250,
        1000,
    )
    assert estimate.projected_minor == 517_250
    assert estimate.total_minor == 518_000  # 518 h from 10:00 on 10 March to 1 April


def test_an_empty_chart_says_so(as_user, owner):
    page = as_user(owner).get(OVERVIEW)
    assert 'id="usage-data"' not in page.content.decode()
    assert "Nothing used in the last 30 days." in page.content.decode()


@pytest.fixture
def invoice(organization):
    return InvoiceFactory(organization=organization, number="INV-TEST-1")


@pytest.mark.parametrize(("role", "status"), [("owner", 200), ("billing", 200), ("viewer", 403)])
def test_an_invoice_page(as_user, organization, member_of, invoice, role, status):
    response = as_user(member_of(organization, role)).get(
        reverse("billing:invoice_detail", kwargs={"invoice_id": invoice.pk})
    )
    assert response.status_code == status
    if status == 200:
        assert "INV-TEST-1" in response.content.decode()


def test_another_organizations_invoice_is_not_found(as_user, other_owner, invoice):
    response = as_user(other_owner).get(
        reverse("billing:invoice_detail", kwargs={"invoice_id": invoice.pk})
    )
    assert response.status_code == 404


def test_an_invoice_page_lists_its_lines(
    clock, world, running_host, operator, owner, as_user, settings
):
    from apps.billing import invoicing

    settings.LOAM_INVOICE_TAX_RATE = "0.06"
    running_host(1, data_disk_gb=100, name="trainer")
    clock.shift(7200)
    issued = invoicing.issue_on_demand(organization=world.organization, operator=operator)
    page = as_user(owner).get(reverse("billing:invoice_detail", kwargs={"invoice_id": issued.pk}))
    html = page.content.decode()
    assert [line.description for line in page.context["lines"]] == ["trainer", "trainer"]
    assert "¥20.00" in html and "¥0.10" in html  # compute, disk
    # Prices include tax: the total is what was charged, 2010 / 1.06 = 1896.23 -> ¥18.96 net.
    assert "¥18.96" in html and "¥1.14" in html and "¥20.10" in html  # net, 6 %, total
    assert "Prices include tax" in html


def test_the_wallet_is_charged_the_invoice_total(
    clock, world, running_host, operator, owner, as_user, settings, meter
):
    """Issue 18: 94 s at ¥10.00 an hour is ¥0.26 charged; the invoice's total is that ¥0.26
    (tax included: ¥0.25 net, ¥0.01 tax), not ¥0.28 on top of it."""
    from apps.billing import invoicing

    settings.LOAM_INVOICE_TAX_RATE = "0.06"
    wallet = Wallet.objects.get(organization=world.organization)
    before = wallet.balance_minor
    running_host(1, name="short")
    clock.shift(94)
    meter()
    issued = invoicing.issue_on_demand(organization=world.organization, operator=operator)
    wallet.refresh_from_db()
    charged = -sum(
        LedgerEntry.objects.filter(wallet=wallet, kind=EntryKind.CHARGE).values_list(
            "amount_minor", flat=True
        )
    )
    assert charged == before - wallet.balance_minor == 26
    assert issued.total_minor == charged
    assert (issued.subtotal_minor, issued.tax_minor) == (25, 1)
    assert issued.subtotal_minor + issued.tax_minor == issued.total_minor
    html = as_user(owner).get(reverse("billing:invoice_detail", kwargs={"invoice_id": issued.pk}))
    html = html.content.decode()
    assert "¥0.26" in html and "¥0.28" not in html


# --- Operator pages -------------------------------------------------------------------------


def test_the_park_billing_page(clock, world, running_host, meter, operator, as_user):
    """With a tenant that used something and one in debt, so both tables link to them."""
    running_host(1)
    clock.shift(3600)
    meter()
    broke = OrganizationFactory(park=world.park, wallet=-500, name="Broke Co")
    page = as_user(operator).get(OPS)
    assert page.status_code == 200
    html = page.content.decode()
    assert ops_organization(world.organization) in html  # top tenants
    assert ops_organization(broke) in html  # outstanding
    assert [row["amount"] for row in page.context["revenue"]] == [1000]


def test_another_parks_operator_sees_only_their_park(world, other_park_operator, as_user):
    page = as_user(other_park_operator).get(OPS, {"park": world.park.pk})
    assert page.status_code == 200
    assert page.context["park"] != world.park


@pytest.mark.parametrize("role", ["owner", "billing"])
def test_tenants_cannot_open_operator_pages(as_user, organization, member_of, invoice, role):
    client = as_user(member_of(organization, role))
    for url in (OPS, ops_organization(organization), ops_invoice(invoice)):
        assert client.get(url).status_code == 403, url


def test_another_parks_operator_gets_not_found(as_user, organization, invoice, other_park_operator):
    client = as_user(other_park_operator)
    assert client.get(ops_organization(organization)).status_code == 404
    assert client.get(ops_invoice(invoice)).status_code == 404
    response = client.post(
        ops_organization(organization), {"action": "adjust", "amount": "100", "reason": "x"}
    )
    assert response.status_code == 404
    assert not LedgerEntry.objects.exists()


def test_the_operator_sees_the_organization_and_its_invoice(
    as_user, organization, invoice, operator
):
    client = as_user(operator)
    page = client.get(ops_organization(organization))
    assert page.status_code == 200
    assert ops_invoice(invoice) in page.content.decode()
    assert client.get(ops_invoice(invoice)).status_code == 200


# --- Operator forms -------------------------------------------------------------------------


@pytest.fixture
def verified(organization):
    type(organization).objects.filter(pk=organization.pk).update(verification_state="verified")
    organization.refresh_from_db()
    return organization


def test_saving_terms(as_user, verified, operator):
    response = as_user(operator).post(
        ops_organization(verified), {"action": "terms", "mode": "postpaid", "credit_limit": "500"}
    )
    assert response.status_code == 302
    assert response["Location"] == ops_organization(verified)
    wallet = Wallet.objects.get(organization=verified)
    assert (wallet.mode, wallet.credit_limit_minor) == (BillingMode.POSTPAID, 50_000)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"mode": "barter", "credit_limit": "0"}, "Select a valid choice."),
        ({"mode": "postpaid", "credit_limit": "-1"}, "greater than or equal to 0"),
        ({"mode": "postpaid", "credit_limit": "lots"}, "Enter a number."),
        ({"mode": "postpaid"}, "This field is required."),
    ],
)
def test_bad_terms_show_their_errors(as_user, verified, operator, data, error):
    response = as_user(operator).post(ops_organization(verified), {"action": "terms", **data})
    assert response.status_code == 422
    assert error in response.content.decode()
    assert Wallet.objects.get(organization=verified).mode == BillingMode.PREPAID


def test_postpaid_terms_for_an_unverified_organization_are_refused(as_user, organization, operator):
    response = as_user(operator).post(
        ops_organization(organization), {"action": "terms", "mode": "postpaid", "credit_limit": "5"}
    )
    assert response.status_code == 422
    assert "Only verified enterprises can be postpaid." in response.content.decode()
    assert Wallet.objects.get(organization=organization).mode == BillingMode.PREPAID


def test_a_credit_limit_on_prepaid_terms_is_a_form_error(as_user, verified, operator):
    response = as_user(operator).post(
        ops_organization(verified), {"action": "terms", "mode": "prepaid", "credit_limit": "100"}
    )
    assert response.status_code == 422
    assert "A prepaid wallet has no credit limit." in response.content.decode()


def test_an_adjustment(as_user, organization, operator):
    response = as_user(operator).post(
        ops_organization(organization),
        {"action": "adjust", "amount": "-12.34", "reason": "Refund reversed"},
        follow=True,
    )
    assert response.redirect_chain == [(ops_organization(organization), 302)]
    assert messages_of(response) == ["Balance adjusted."]
    entry = LedgerEntry.objects.get()
    assert (entry.kind, entry.amount_minor, entry.description) == (
        EntryKind.ADJUSTMENT,
        -1234,
        "Refund reversed",
    )
    assert (
        Wallet.objects.get(organization=organization).balance_minor == FUNDED_BALANCE_MINOR - 1234
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"amount": "10", "reason": ""}, "This field is required."),
        ({"amount": "10", "reason": "   "}, "This field is required."),
        ({"amount": "", "reason": "x"}, "This field is required."),
        (
            {"amount": "1.234", "reason": "x"},
            "Ensure that there are no more than 2 decimal places.",
        ),
        ({"amount": "ten", "reason": "x"}, "Enter a number."),
    ],
)
def test_bad_adjustments_show_their_errors(as_user, organization, operator, data, error):
    response = as_user(operator).post(ops_organization(organization), {"action": "adjust", **data})
    assert response.status_code == 422
    assert error in response.content.decode()
    assert not LedgerEntry.objects.exists()


def test_a_zero_adjustment_is_a_form_error(as_user, organization, operator):
    response = as_user(operator).post(
        ops_organization(organization), {"action": "adjust", "amount": "0", "reason": "x"}
    )
    assert response.status_code == 422
    assert "Enter an amount other than zero." in response.content.decode()


def test_issuing_an_invoice_on_demand(clock, world, running_host, operator, as_user):
    running_host(1)
    clock.shift(3600)
    response = as_user(operator).post(
        ops_organization(world.organization), {"action": "invoice"}, follow=True
    )
    invoice = Invoice.objects.get()
    assert messages_of(response) == [f"Invoice {invoice.number} issued."]
    assert (invoice.subtotal_minor, invoice.total_minor) == (943, 1000)  # tax included


def test_issuing_with_nothing_to_invoice_says_so(as_user, organization, operator):
    response = as_user(operator).post(ops_organization(organization), {"action": "invoice"})
    assert response.status_code == 200
    assert messages_of(response) == ["There is no usage to invoice since the last invoice."]
    assert not Invoice.objects.exists()


def test_an_unknown_action_is_not_found(as_user, organization, operator):
    response = as_user(operator).post(ops_organization(organization), {"action": "steal"})
    assert response.status_code == 404


def test_an_invoice_page_has_an_item_per_flavor_with_hours_and_unit_price(
    clock, world, running_host, operator, owner, as_user, settings
):
    """Issue 35: two hosts of one flavor are one item, not one line per host only."""
    from apps.billing import invoicing

    settings.LOAM_INVOICE_TAX_RATE = "0.06"
    first = running_host(1, name="trainer")
    running_host(1, name="tester")
    clock.shift(7200)
    issued = invoicing.issue_on_demand(organization=world.organization, operator=operator)
    page = as_user(owner).get(reverse("billing:invoice_detail", kwargs={"invoice_id": issued.pk}))
    html = page.content.decode()
    (item,) = re.findall(r'<tr class="invoice-item" data-kind="compute">(.*?)</tr>', html, re.S)
    assert first.flavor.code in item
    assert "4.00" in item and "¥10.00" in item and "¥40.00" in item
    assert [line.description for line in page.context["lines"]] == ["trainer", "tester"]
