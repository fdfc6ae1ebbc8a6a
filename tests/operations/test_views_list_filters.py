"""The console's lists filter by organization by name (a list of every organization to choose
from grew with the park: 1,000 options on each page at issue 15's scale); an organization's own
page still links to its rows by id."""

import pytest

from tests.factories import AuditEventFactory, InstanceFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def two(park):
    return (
        OrganizationFactory(park=park, name="Aurora Robotics"),
        OrganizationFactory(park=park, name="Basalt Labs"),
    )


@pytest.mark.parametrize(
    ("path", "make", "shown"),
    [
        (
            "/ops/instances/",
            lambda o: InstanceFactory(organization=o, running=True, name=f"host-of-{o.slug}"),
            "name",
        ),
        (
            "/ops/audit/",
            lambda o: AuditEventFactory(organization=o, object_repr=f"event-of-{o.slug}"),
            "object_repr",
        ),
    ],
    ids=["instances", "audit"],
)
def test_lists_filter_by_organization_name_or_id(client, operator, two, path, make, shown):
    aurora_row, basalt_row = (make(o) for o in two)
    client.force_login(operator)

    page = client.get(path, {"organization_name": "auror"}).content.decode()
    assert getattr(aurora_row, shown) in page
    assert getattr(basalt_row, shown) not in page
    assert 'name="organization_name"' in page
    assert '<select name="organization"' not in page

    by_id = client.get(path, {"organization": two[1].pk}).content.decode()
    assert getattr(basalt_row, shown) in by_id
    assert getattr(aurora_row, shown) not in by_id
    assert f'type="hidden" name="organization" value="{two[1].pk}"' in by_id
