"""A posted `next` that is not a path on this site is ignored: redirect() would read "x" (no
"/") as a URL name and fail with NoReverseMatch, a 500."""

import pytest
from django.test import Client

from tests.factories import OrderFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("target", ["²", "NaN", "-1"])
def test_switching_organization_with_a_next_that_is_no_path(owner, organization, target):
    client = Client(raise_request_exception=False)
    client.force_login(owner)

    response = client.post("/org/switch/", {"organization": organization.pk, "next": target})

    assert response.status_code == 302
    assert response["Location"] == "/org/"


@pytest.mark.parametrize("target", ["²", "NaN"])
def test_deciding_an_order_with_a_next_that_is_no_path(operator, organization, target):
    order = OrderFactory(organization=organization, state="awaiting_approval")
    client = Client(raise_request_exception=False)
    client.force_login(operator)

    response = client.post(
        f"/ops/orders/{order.pk}/decision/", {"decision": "reject", "reason": "", "next": target}
    )

    assert response.status_code == 302
    assert response["Location"] == "/ops/orders/"
