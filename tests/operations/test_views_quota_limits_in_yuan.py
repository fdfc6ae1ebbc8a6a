"""The operator's quota page for one organization (operations:organization_quotas): the monthly
spend limit is typed and shown in yuan and stored in fen; every other limit is a whole number."""

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.core.models import AuditEvent
from apps.quotas.models import QuotaLimit, QuotaResource
from tests.factories import QuotaLimitFactory, UsageRecordFactory

pytestmark = pytest.mark.django_db

NOT_WHOLE = "Enter a whole number for this limit."


@pytest.fixture
def quotas(client, operator, organization):
    """The page's address, with the park's operator signed in."""
    client.force_login(operator)
    return reverse("operations:organization_quotas", kwargs={"organization_id": organization.pk})


def add(client, url, resource, value):
    return client.post(url, {"action": "add", "resource": resource, "value": value})


def change(client, url, limit, value):
    return client.post(url, {"action": "set", "limit_id": limit.pk, "value": value}, follow=True)


def stored(organization, resource):
    return QuotaLimit.objects.get(organization=organization, resource=resource).limit


def limit_input(html: str, resource: str) -> str:
    """The value in the limit field of the resource's row."""
    row = re.search(rf'<tr data-resource="{resource}">(.*?)</tr>', html, re.S)
    assert row, html
    return re.search(r'name="value" value="([^"]*)"', row.group(1)).group(1)


# --- Adding a limit ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "fen"),
    [("5000.00", 500_000), ("5000", 500_000), ("12.5", 1_250), ("0.01", 1)],
)
def test_a_monthly_spend_limit_is_typed_in_yuan_and_stored_in_fen(
    client, quotas, organization, typed, fen
):
    response = add(client, quotas, QuotaResource.MONTHLY_SPEND, typed)

    assert response.status_code == 302
    assert stored(organization, QuotaResource.MONTHLY_SPEND) == fen


@pytest.mark.parametrize(("typed", "count"), [("3", 3), ("2.00", 2)])
def test_any_other_limit_is_stored_as_typed(client, quotas, organization, typed, count):
    """Only money is scaled: three accelerators stay three."""
    response = add(client, quotas, QuotaResource.ACCELERATORS, typed)

    assert response.status_code == 302
    assert stored(organization, QuotaResource.ACCELERATORS) == count


def test_a_fraction_of_a_card_is_refused_on_the_form(client, quotas, organization):
    response = add(client, quotas, QuotaResource.ACCELERATORS, "2.5")

    assert response.status_code == 422
    html = response.content.decode()
    form = re.search(r'<form[^>]*id="quota-add"[^>]*>(.*?)</form>', html, re.S).group(1)
    assert NOT_WHOLE in form
    value_input = re.search(r'<input[^>]*name="value"[^>]*>', form).group(0)
    assert "is-invalid" in value_input and 'value="2.5"' in value_input  # kept to correct
    assert not QuotaLimit.objects.filter(organization=organization).exists()
    assert not AuditEvent.objects.filter(action="quota.changed").exists()


def test_spend_below_a_fen_is_refused(client, quotas, organization):
    response = add(client, quotas, QuotaResource.MONTHLY_SPEND, "12.345")

    assert response.status_code == 422
    assert not QuotaLimit.objects.filter(organization=organization).exists()


def test_the_resource_list_names_the_spend_limits_currency(client, quotas):
    html = client.get(quotas).content.decode()

    assert '<option value="monthly_spend">Monthly spend (¥)</option>' in html


# --- Changing a limit -------------------------------------------------------------------------


def test_changing_a_spend_limit_takes_yuan(client, quotas, organization, park):
    limit = QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.MONTHLY_SPEND, limit=100_000
    )

    response = change(client, quotas, limit, "12.5")

    assert "Limit saved." in response.content.decode()
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 1_250


def test_changing_a_count_to_a_fraction_is_refused_and_keeps_the_limit(
    client, quotas, organization, park
):
    limit = QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.INSTANCES, limit=10
    )

    response = change(client, quotas, limit, "7.5")

    html = response.content.decode()
    assert NOT_WHOLE in html and "Limit saved." not in html
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 10
    assert not AuditEvent.objects.filter(action="quota.changed").exists()


def test_changing_a_count_to_a_whole_number_saves_it(client, quotas, organization, park):
    limit = QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.VCPU, limit=64
    )

    change(client, quotas, limit, "32")

    assert QuotaLimit.objects.get(pk=limit.pk).limit == 32


# --- What the page shows ----------------------------------------------------------------------


def test_the_page_shows_the_spend_limit_in_yuan_and_counts_as_they_are(
    client, quotas, organization, park
):
    QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.MONTHLY_SPEND, limit=500_000
    )
    QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.INSTANCES, limit=10
    )

    html = client.get(quotas).content.decode()

    assert limit_input(html, "monthly_spend") == "5000.00"
    assert limit_input(html, "instances") == "10"
    spend_row = re.search(r'<tr data-resource="monthly_spend">(.*?)</tr>', html, re.S).group(1)
    assert 'step="0.01"' in spend_row and "¥" in spend_row


def test_the_history_shows_spend_limits_as_money(client, quotas):
    add(client, quotas, QuotaResource.MONTHLY_SPEND, "5000.00")

    html = client.get(quotas).content.decode()

    history = re.search(r'<table[^>]*id="quota-history"[^>]*>(.*?)</table>', html, re.S).group(1)
    assert "¥5,000.00" in history
    assert "500000" not in history


def test_a_spend_limit_under_what_was_spent_warns_in_yuan(client, quotas, organization, park):
    limit = QuotaLimitFactory(
        park=park, organization=organization, resource=QuotaResource.MONTHLY_SPEND, limit=500_000
    )
    now = timezone.now()
    UsageRecordFactory(
        organization=organization,
        started_at=now,
        amount_minor=30_000,
        meter__started_at=now,
        meter__ended_at=now,
    )

    html = change(client, quotas, limit, "100").content.decode()

    assert "already uses ¥300.00" in html and "new limit of ¥100.00" in html


# --- Adding and changing limits, in English ---------------------------------------------------

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.mark.parametrize(("typed", "stored"), [("5000.00", 500_000), ("12.5", 1250)])
def test_a_monthly_spend_limit_is_typed_in_yuan(client, quotas, organization, typed, stored):
    response = client.post(quotas, {"action": "add", "resource": "monthly_spend", "value": typed})

    assert response.status_code == 302
    limit = QuotaLimit.objects.get(organization=organization, resource=QuotaResource.MONTHLY_SPEND)
    assert limit.limit == stored
    page = client.get(quotas, **ENGLISH).content.decode()
    assert f'value="{stored / 100:.2f}"' in page


def test_a_fraction_of_a_card_is_a_form_error(client, quotas, organization):
    response = client.post(
        quotas, {"action": "add", "resource": "accelerators", "value": "2.5"}, **ENGLISH
    )

    assert response.status_code == 422
    assert "Enter a whole number for this limit." in response.content.decode()
    assert not QuotaLimit.objects.filter(organization=organization).exists()


def test_changing_a_limit_to_a_fraction_is_refused_and_keeps_it(client, quotas, organization):
    limit = QuotaLimit.objects.create(
        park=organization.park, organization=organization, resource="vcpu", limit=64
    )

    response = client.post(
        quotas, {"action": "set", "limit_id": limit.pk, "value": "7.5"}, follow=True, **ENGLISH
    )

    assert "Enter a whole number for this limit." in response.content.decode()
    assert QuotaLimit.objects.get(pk=limit.pk).limit == 64
