"""On PostgreSQL the portal binds parameters on the server and prepares the statements a
connection runs again and again (portal/settings.py), so PostgreSQL parses and plans each once."""

import pytest
from django.db import connection

from apps.tenants.models import Organization
from tests.factories import OrganizationFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_statement_run_often_is_prepared_once_with_its_parameters_bound():
    organizations = OrganizationFactory.create_batch(7)
    for organization in organizations:
        # The same statement with another value each time: bound, not spelled into the SQL.
        assert Organization.objects.get(pk=organization.pk) == organization
    looked_up = [s for s in prepared_statements() if 'FROM "tenants_organization"' in s]
    assert len(looked_up) == 1
    assert "$1" in looked_up[0]


def test_a_statement_run_once_is_not_prepared():
    organization = OrganizationFactory()
    assert Organization.objects.filter(slug=organization.slug).exists()
    assert not [s for s in prepared_statements() if '"tenants_organization"."slug"' in s]
