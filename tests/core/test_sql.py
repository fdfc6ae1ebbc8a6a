from decimal import Decimal

import pytest

from apps.core import sql
from apps.tenants.models import Organization
from tests.factories import OrganizationFactory

SQL = "SELECT id FROM tenants_organization WHERE id IN ({members}) ORDER BY id"


def ids_in(organizations) -> list[int]:
    members, params = sql.members(organizations)
    return [pk for (pk,) in sql.fetch_all(Organization, SQL.format(members=members), params)]


@pytest.mark.django_db
def test_members_takes_ids_rows_or_a_queryset(park):
    first, second = OrganizationFactory(park=park), OrganizationFactory(park=park)
    OrganizationFactory()  # another park's

    assert ids_in([second.pk, first.pk]) == [first.pk, second.pk]
    assert ids_in([second]) == [second.pk]
    assert ids_in(Organization.objects.filter(park=park)) == [first.pk, second.pk]


@pytest.mark.django_db
def test_no_members_match_nothing(park):
    OrganizationFactory(park=park)

    assert sql.placeholders([]) == "NULL"
    assert ids_in([]) == []
    assert ids_in(Organization.objects.none()) == []


def test_placeholders_one_for_each_value():
    assert sql.placeholders([7, 8, 9]) == "%s, %s, %s"


@pytest.mark.parametrize("value", [Decimal("3.12"), 3.12, "3.12"])
def test_a_numeric_value_is_a_decimal_whatever_the_database_answered(value):
    assert sql.decimal(value) == Decimal("3.12")
    assert sql.decimal(4) == Decimal(4)
