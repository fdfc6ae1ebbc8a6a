"""Sign-up, login and two-factor authentication through django-allauth, as the portal configures
it: mandatory email verification, login rate limits, TOTP, and the parks' MFA requirement."""

from types import SimpleNamespace

import pytest
from allauth.account.models import EmailAddress
from allauth.mfa import app_settings as mfa_settings
from allauth.mfa.totp.internal import auth as totp_auth
from allauth.mfa.totp.internal.auth import (
    TOTP,
    format_hotp_value,
    generate_totp_secret,
    hotp_value,
)
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.cache import cache
from django.urls import reverse

from apps.tenants.models import Park, Role
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "a long and unusual passphrase 42"
TOO_MANY = "Too many failed login attempts. Try again later."


@pytest.fixture(autouse=True)
def _setup(client, settings):
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"
    client.cookies["django_language"] = "en"
    cache.clear()  # rate-limit counters and used TOTP codes live in the cache
    yield
    cache.clear()


def logged_in_user_id(client):
    return client.session.get("_auth_user_id")


def login(client, email, password="pw"):
    return client.post("/accounts/login/", {"login": email, "password": password})


@pytest.fixture(autouse=True)
def _totp_clock(monkeypatch):
    """Pin the clock allauth checks TOTP codes against (MFA_TOTP_TOLERANCE is 0), so a code
    computed here cannot expire at a 30-second boundary before the request is made."""
    now = totp_auth.time.time()
    monkeypatch.setattr(totp_auth, "time", SimpleNamespace(time=lambda: now))


def totp_code(secret: str) -> str:
    counter = int(totp_auth.time.time()) // mfa_settings.TOTP_PERIOD
    return format_hotp_value(hotp_value(secret, counter))


def activate_totp(user) -> str:
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    return secret


# --- Sign-up and email verification ----------------------------------------------------------


def test_signup_sends_a_verification_email(client):
    response = client.post(
        "/accounts/signup/",
        {"email": "New.Person@Example.com", "password1": PASSWORD, "password2": PASSWORD},
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    user = get_user_model().objects.get(email__iexact="new.person@example.com")
    address = EmailAddress.objects.get(user=user)
    assert address.verified is False
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["new.person@example.com"]
    assert "/accounts/confirm-email/" in mail.outbox[0].body
    assert logged_in_user_id(client) is None


def test_signup_with_mismatched_passwords_creates_nobody(client):
    response = client.post(
        "/accounts/signup/",
        {"email": "x@example.com", "password1": PASSWORD, "password2": PASSWORD + "!"},
    )
    assert response.status_code == 200
    assert not get_user_model().objects.filter(email="x@example.com").exists()
    assert not mail.outbox


def test_signup_with_a_taken_email_is_refused(client):
    UserFactory(email="taken@example.com")
    client.post(
        "/accounts/signup/",
        {"email": "taken@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert get_user_model().objects.filter(email__iexact="taken@example.com").count() == 1
    assert logged_in_user_id(client) is None


def test_login_before_verifying_does_not_log_in(client):
    user = UserFactory(verified_email=False)
    EmailAddress.objects.create(user=user, email=user.email, verified=False, primary=True)

    response = login(client, user.email)

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert logged_in_user_id(client) is None
    assert len(mail.outbox) == 1  # the confirmation is sent again
    assert mail.outbox[0].to == [user.email]
    assert client.get("/org/").status_code == 302


def test_confirming_the_email_then_logging_in_works(client):
    client.post(
        "/accounts/signup/",
        {"email": "fresh@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    body = mail.outbox[0].body
    link = next(word for word in body.split() if "/accounts/confirm-email/" in word)
    path = link[link.index("/accounts/") :]
    client.post(path)
    assert EmailAddress.objects.get(email="fresh@example.com").verified is True

    client.logout()
    response = login(client, "fresh@example.com", PASSWORD)
    assert response.status_code == 302
    assert logged_in_user_id(client) is not None


def test_verified_user_logs_in(client):
    user = UserFactory()
    response = login(client, user.email)
    assert response.status_code == 302
    assert logged_in_user_id(client) == str(user.pk)


def test_password_reset_sends_an_email(client):
    user = UserFactory()
    response = client.post("/accounts/password/reset/", {"email": user.email})

    assert response.status_code == 302
    assert response["Location"] == reverse("account_reset_password_done")
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == [user.email]
    assert "/accounts/password/reset/key/" in mail.outbox[0].body


def test_password_reset_page_renders(client):
    assert client.get("/accounts/password/reset/").status_code == 200


def test_a_signed_in_user_reaches_the_password_change_from_the_navigation(client):
    user = UserFactory()
    client.force_login(user)

    home = client.get("/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    change = client.get(reverse("account_change_password"), HTTP_ACCEPT_LANGUAGE="en")

    assert f'id="nav-account" href="{reverse("account_change_password")}"' in home
    assert user.email in home
    assert change.status_code == 200
    assert 'name="oldpassword"' in change.content.decode()


# --- Login rate limits (ACCOUNT_RATE_LIMITS: login_failed "10/m/ip,5/5m/key") ----------------


def test_five_failed_logins_lock_the_email(client):
    user = UserFactory()
    for _ in range(5):
        response = login(client, user.email, "wrong")
        assert response.status_code == 200
        assert TOO_MANY not in response.content.decode()

    # The sixth attempt is refused even with the right password.
    response = login(client, user.email)
    assert response.status_code == 200
    assert TOO_MANY in response.content.decode()
    assert logged_in_user_id(client) is None

    # Another address from the same IP (below its ten-a-minute limit) still logs in.
    other = UserFactory()
    assert login(client, other.email).status_code == 302
    assert logged_in_user_id(client) == str(other.pk)


def test_ten_failed_logins_from_one_ip_lock_every_email(client):
    for n in range(10):
        login(client, f"nobody{n}@example.com", "wrong")
    user = UserFactory()
    response = login(client, user.email)
    assert TOO_MANY in response.content.decode()
    assert logged_in_user_id(client) is None


def test_repeated_failed_logins_end_in_429(client):
    """Locked attempts still count against the login view's own limit (allauth's default
    "login": "30/m/ip"); past it the login page answers 429."""
    user = UserFactory()
    statuses = [login(client, user.email, "wrong").status_code for _ in range(31)]
    assert statuses[:30] == [200] * 30
    assert statuses[30] == 429
    assert login(client, user.email).status_code == 429
    assert logged_in_user_id(client) is None


def test_a_successful_login_does_not_count_as_a_failure(client):
    user = UserFactory()
    for _ in range(4):
        login(client, user.email, "wrong")
    assert login(client, user.email).status_code == 302
    client.logout()
    # Four failures and a success: one more failure is still allowed before the lock.
    response = login(client, user.email, "wrong")
    assert TOO_MANY not in response.content.decode()


# --- TOTP ------------------------------------------------------------------------------------


def test_login_with_totp_goes_through_the_authenticate_step(client):
    user = UserFactory()
    secret = activate_totp(user)

    response = login(client, user.email)

    assert response.status_code == 302
    assert response["Location"] == "/accounts/2fa/authenticate/"
    assert logged_in_user_id(client) is None
    assert client.get("/accounts/2fa/authenticate/").status_code == 200

    response = client.post("/accounts/2fa/authenticate/", {"code": totp_code(secret)})
    assert response.status_code == 302
    assert logged_in_user_id(client) == str(user.pk)


def test_a_wrong_totp_code_does_not_log_in(client):
    user = UserFactory()
    secret = activate_totp(user)
    login(client, user.email)
    right = totp_code(secret)
    wrong = "000000" if right != "000000" else "111111"

    response = client.post("/accounts/2fa/authenticate/", {"code": wrong})

    assert response.status_code == 200
    assert logged_in_user_id(client) is None


def test_a_totp_code_works_only_once(client):
    user = UserFactory()
    secret = activate_totp(user)
    code = totp_code(secret)
    login(client, user.email)
    client.post("/accounts/2fa/authenticate/", {"code": code})
    assert logged_in_user_id(client) == str(user.pk)
    client.logout()

    login(client, user.email)
    response = client.post("/accounts/2fa/authenticate/", {"code": code})
    assert response.status_code == 200
    assert logged_in_user_id(client) is None


# --- The parks' MFA requirement --------------------------------------------------------------


def require(park, **flags):
    Park.objects.filter(pk=park.pk).update(**flags)


def test_owner_without_totp_is_sent_to_set_it_up(client, park, owner):
    require(park, require_mfa_for_owners=True)
    client.force_login(owner)

    response = client.get("/org/")
    assert response.status_code == 302
    assert response["Location"] == reverse("mfa_activate_totp")
    for path in ("/org/members/", "/catalog/", "/ops/"):
        assert client.get(path)["Location"] == reverse("mfa_activate_totp"), path

    # The account pages, where TOTP is set up, still load.
    assert client.get("/accounts/2fa/").status_code == 200
    assert client.get("/accounts/email/").status_code == 200
    # allauth asks for the password again before TOTP can be added; that page loads too.
    activate = client.get(reverse("mfa_activate_totp"), follow=True)
    assert activate.status_code == 200
    assert [url for url, _status in activate.redirect_chain] == [
        "/accounts/reauthenticate/?next=%2Faccounts%2F2fa%2Ftotp%2Factivate%2F"
    ]


def test_owner_sets_up_totp_and_then_reaches_the_organization(client, park, owner):
    from allauth.mfa.models import Authenticator

    require(park, require_mfa_for_owners=True)
    client.force_login(owner)
    assert client.get("/org/")["Location"] == reverse("mfa_activate_totp")

    response = client.post(
        "/accounts/reauthenticate/?next=%2Faccounts%2F2fa%2Ftotp%2Factivate%2F", {"password": "pw"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("mfa_activate_totp")
    assert client.get(reverse("mfa_activate_totp")).status_code == 200
    secret = client.session["mfa.totp.secret"]

    response = client.post(reverse("mfa_activate_totp"), {"code": totp_code(secret)})

    assert response.status_code == 302
    assert Authenticator.objects.filter(user=owner, type=Authenticator.Type.TOTP).exists()
    assert client.get("/org/").status_code == 200


def test_owner_with_totp_reaches_the_organization(client, park, owner):
    require(park, require_mfa_for_owners=True)
    activate_totp(owner)
    client.force_login(owner)
    assert client.get("/org/").status_code == 200


def test_owner_rule_does_not_touch_other_roles(client, park, organization, member_of):
    require(park, require_mfa_for_owners=True)
    for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER):
        client.force_login(member_of(organization, role))
        assert client.get("/org/").status_code == 200, role


def test_owner_rule_of_another_park_does_not_apply(client, park, owner):
    from tests.factories import ParkFactory

    require(ParkFactory(), require_mfa_for_owners=True, require_mfa_for_operators=True)
    client.force_login(owner)
    assert client.get("/org/").status_code == 200


def test_operator_without_totp_is_sent_to_set_it_up(client, park, operator):
    require(park, require_mfa_for_operators=True)
    client.force_login(operator)

    response = client.get("/ops/")
    assert response.status_code == 302
    assert response["Location"] == reverse("mfa_activate_totp")
    assert client.get("/accounts/2fa/").status_code == 200


def test_operator_with_totp_reaches_the_back_office(client, park, operator):
    require(park, require_mfa_for_operators=True)
    activate_totp(operator)
    client.force_login(operator)
    assert client.get("/ops/").status_code == 200


def test_operator_rule_does_not_apply_to_owners(client, park, owner):
    require(park, require_mfa_for_operators=True)
    client.force_login(owner)
    assert client.get("/org/").status_code == 200


def test_owner_without_totp_cannot_use_the_api_with_the_session(client, park, owner):
    require(park, require_mfa_for_owners=True)
    client.force_login(owner)
    assert client.get("/api/v1/api-keys/").status_code in (302, 401, 403)


def test_a_locked_email_is_not_locked_for_good(client):
    """Issue 18: the lock lasts the rest of the 5-minute window, then the real user logs in."""
    import time_machine
    from django.utils import timezone

    user = UserFactory()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(5):
            login(client, user.email, "wrong")
        assert TOO_MANY in login(client, user.email).content.decode()
        clock.shift(5 * 60 + 1)
        assert login(client, user.email).status_code == 302
        assert logged_in_user_id(client) == str(user.pk)


def test_a_password_reset_clears_the_lock(client):
    from allauth.account.adapter import get_adapter
    from django.test import RequestFactory

    user = UserFactory()
    for _ in range(5):
        login(client, user.email, "wrong")
    assert TOO_MANY in login(client, user.email).content.decode()
    request = RequestFactory().post("/accounts/password/reset/key/")
    get_adapter(request)._delete_login_attempts_cached_email(request, email=user.email)
    assert login(client, user.email).status_code == 302
