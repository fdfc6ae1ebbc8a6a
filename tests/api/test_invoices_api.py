import pytest

from tests.factories import InvoiceFactory

pytestmark = pytest.mark.django_db


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
