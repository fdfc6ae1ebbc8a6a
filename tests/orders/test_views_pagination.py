"""A tenant's orders and hosts come a page at a time: page 2 shows the rest, newest first
across pages, and a page number that is not one gives page 1 or the last page, never an error."""

import pytest

from apps.orders.views import INSTANCES_PER_PAGE, ORDERS_PER_PAGE
from tests.factories import InstanceFactory, OrderFactory

pytestmark = pytest.mark.django_db

EXTRA = 3  # rows past the first page


def orders(organization, n):
    OrderFactory.create_batch(n, organization=organization)


def hosts(organization, n):
    InstanceFactory.create_batch(n, organization=organization, running=True)


LISTS = [
    ("/orders/", orders, ORDERS_PER_PAGE, "orders"),
    ("/instances/", hosts, INSTANCES_PER_PAGE, "instances"),
]


@pytest.mark.parametrize(("path", "make", "per_page", "rows"), LISTS, ids=["orders", "hosts"])
def test_page_two_shows_the_rest_and_a_bad_page_number_is_no_error(
    client, organization, owner, path, make, per_page, rows
):
    make(organization, per_page + EXTRA)
    client.force_login(owner)

    def shown(query=""):
        response = client.get(path + query)
        assert response.status_code == 200, query
        return [row.pk for row in response.context[rows]]

    first, second = shown(), shown("?page=2")
    assert len(first) == per_page and len(second) == EXTRA
    assert first + second == sorted(first + second, reverse=True)  # newest (latest id) first
    for bad, same_as in (("x", first), ("0", second), ("-4", second), ("99", second)):
        assert shown(f"?page={bad}") == same_as, bad
