"""Ids and counts read from text are ASCII digits only, and fit a bigint; measures are written
as people read them."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.template import Context, Template
from django.test import Client

from apps.catalog.models import AcceleratorModel, Region
from apps.core.numbers import IdsField, figure, parse_id
from apps.orders.models import InstanceState
from tests.factories import InstanceFactory, RegionFactory


@pytest.mark.parametrize(
    ("text", "number"), [("0", 0), ("7", 7), ("0042", 42), ("9" * 18, 10**18 - 1)]
)
def test_ascii_digits_are_a_number(text, number):
    assert parse_id(text) == number


@pytest.mark.parametrize(
    "text",
    [
        "²",  # a digit to str.isdigit(), not to int()
        "٣",  # Arabic-Indic three: int() reads it, the site does not
        "1²",
        "",
        "-1",
        "+1",
        " 1",
        "1\n",
        "1.0",
        "4\x00",
        "9" * 19,  # past a bigint
        None,
        12,
    ],
)
def test_anything_else_is_none(text):
    assert parse_id(text) is None


@pytest.fixture
def browser():
    return Client(raise_request_exception=False)


@pytest.mark.django_db
def test_pages_read_unicode_digits_as_no_number(browser, owner, operator, organization, park):
    """Each of these read "²" as a number (str.isdigit()) and failed in int(): a 500."""
    instance = InstanceFactory(organization=organization, state=InstanceState.RUNNING)
    browser.force_login(owner)
    assert browser.get(f"/instances/{instance.pk}/telemetry/?minutes=²").status_code < 500
    assert browser.post("/org/switch/", {"organization": "²"}).status_code == 404
    assert browser.get("/instances/new/", {"again": "²"}).status_code == 200
    browser.force_login(operator)
    assert browser.get("/ops/orders/", {"q": "#²"}).status_code == 200
    revoked = browser.post(
        f"/ops/agents/parks/{park.pk}/servers/", {"action": "revoke", "server": "²"}
    )
    assert revoked.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("pk", ["99999999999999999999", "²", "-1"])
def test_a_choice_of_ids_refuses_what_is_no_id_as_a_form_error(pk):
    field = IdsField(queryset=AcceleratorModel.objects.all())
    with pytest.raises(ValidationError) as refused:
        field.clean([pk])
    assert refused.value.code == "invalid_pk_value"


@pytest.mark.django_db
def test_a_choice_by_code_takes_codes_that_are_no_ids():
    """Regions are chosen by their code ("east"): only an integer key is held to digits."""
    region = RegionFactory(code="east")
    field = IdsField(queryset=Region.objects.all(), to_field_name="code")
    assert list(field.clean(["east"])) == [region]
    with pytest.raises(ValidationError) as refused:
        field.clean(["atlantis"])
    assert refused.value.code == "invalid_choice"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Decimal("158.240"), "158.24"),
        (Decimal("39.560"), "39.56"),
        (Decimal("79.120"), "79.12"),
        (12000, "12,000"),
        (Decimal("60.000"), "60"),
        (Decimal("0.005"), "0.01"),
        (-3, "-3"),
        (1234567.891, "1,234,567.89"),
    ],
)
def test_a_measure_is_written_as_people_read_it(value, shown):
    assert figure(value) == shown


def test_the_quota_rows_show_compute_units_as_figures():
    template = Template("{% load numbers %}{{ used|figure }} / {{ limit|figure }}")
    assert template.render(Context({"used": Decimal("158.240"), "limit": 200})) == "158.24 / 200"
