"""The idempotency key a host operation is posted with is checked like the order form's: one
longer than the order's column holds (with its ":op") is a form error, not a database error."""

import pytest
from django.test import Client

from apps.orders.models import Order

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(owner):
    client = Client(raise_request_exception=False, HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(owner)
    return client


def test_a_key_too_long_is_a_form_error(world, running_host, tenant):
    instance = running_host()
    before = Order.objects.count()

    response = tenant.post(
        f"/instances/{instance.pk}/actions/stop/", {"idempotency_key": "k" * 100}, follow=True
    )

    assert response.status_code == 200
    assert "at most 64 characters" in response.content.decode()
    assert Order.objects.count() == before


def test_a_key_that_fits_is_kept(world, running_host, tenant):
    instance = running_host()

    tenant.post(f"/instances/{instance.pk}/actions/stop/", {"idempotency_key": "k" * 64})
    tenant.post(f"/instances/{instance.pk}/actions/stop/", {"idempotency_key": "k" * 64})

    assert Order.objects.filter(instance=instance, idempotency_key="k" * 64 + ":op").count() == 1
