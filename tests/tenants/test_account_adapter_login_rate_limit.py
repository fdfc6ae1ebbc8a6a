"""The per-account failed-login limit ("5/5m/key") counts the account, whatever Host and address
the attempts come with (issue 31: allauth's default key included the Host, port and all)."""

import pytest
from django.core.cache import cache

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TOO_MANY = "Too many failed login attempts. Try again later."


@pytest.fixture(autouse=True)
def _setup(client):
    client.cookies["django_language"] = "en"
    cache.clear()  # the rate-limit counters live in the cache
    yield
    cache.clear()


def login(client, email, password, attempt):
    """One attempt from its own address, naming its own port in the Host header."""
    return client.post(
        "/accounts/login/",
        {"login": email, "password": password},
        HTTP_HOST=f"127.0.0.1:{8000 + attempt}",
        REMOTE_ADDR=f"203.0.113.{attempt + 1}",
    )


def test_failed_logins_with_varying_host_ports_still_lock_the_account(client):
    user = UserFactory()  # password "pw"
    for attempt in range(5):
        assert TOO_MANY not in login(client, user.email, "wrong", attempt).content.decode()

    response = login(client, user.email, "pw", attempt=5)

    assert response.status_code == 200
    assert TOO_MANY in response.content.decode()
    assert client.session.get("_auth_user_id") is None


def test_the_lock_is_per_account_and_not_per_host(client):
    user, other = UserFactory(), UserFactory()
    for attempt in range(5):
        login(client, user.email, "wrong", attempt)

    # The same email in another case is the same account.
    assert TOO_MANY in login(client, user.email.upper(), "pw", attempt=6).content.decode()
    assert login(client, other.email, "pw", attempt=7).status_code == 302
