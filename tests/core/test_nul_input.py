"""A page refuses a NUL character (U+0000) anywhere in the query, the form or the path with a
400 page, before a view can hand it to the database (PostgreSQL cannot hold one: a 500)."""

import pytest
from django.test import Client

from apps.orchestration.models import Node
from tests.factories import NodeFactory, PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(operator):
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    return client


def test_a_nul_in_a_posted_value_is_a_400_page(operator_client, park):
    node = NodeFactory(pool=PoolFactory(backend__park=park))

    response = operator_client.post(
        f"/ops/parks/{park.pk}/nodes/",
        {"action": "drain", "node": node.pk, "reason": "maintenance\x00"},
    )

    assert response.status_code == 400
    assert "<html" in response.content.decode()
    assert not Node.objects.get(pk=node.pk).is_drained


@pytest.mark.parametrize(
    "query", [{"q": "#1\x00"}, {"q\x00": "1"}], ids=["in a value", "in a name"]
)
def test_a_nul_in_the_query_is_a_400_page(operator_client, query):
    assert operator_client.get("/ops/orders/", query).status_code == 400


def test_a_nul_in_the_path_is_a_400_page(operator_client):
    assert operator_client.get("/invitations/abc%00/").status_code == 400


def test_values_without_a_nul_pass(operator_client):
    assert operator_client.get("/ops/orders/", {"q": "#12"}).status_code == 200
