"""Top-ups through Stripe Checkout against a fake Stripe API on 127.0.0.1, and Stripe's webhook
events, signed with the test secret as Stripe signs them."""

import json
import time

import pytest
from django.urls import reverse

from apps.billing.models import (
    EntryKind,
    FundsSuspension,
    LedgerEntry,
    Payment,
    PaymentState,
    StripeEvent,
    Wallet,
)
from apps.orders.models import Instance, InstanceState
from tests.billing.conftest import (
    STRIPE_SECRET_KEY,
    checkout_session,
    signature,
    stripe_event,
)
from tests.factories import FUNDED_BALANCE_MINOR, PaymentFactory, WalletFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]


# stripe-python 16's StripeObject is no longer a dict: session.get(...) raises AttributeError
# ("'get' is a dict method, but a Session is not a dict"). payments._paid calls it on every
# completed session, so the webhook answers 500 and never credits anything.
def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def top_up(client, stripe_settings):
    """top_up(user, amount) POSTs the top-up form as `user`; returns the response."""

    client.cookies["django_language"] = "en"

    def post(user, amount="123.45", **extra):
        client.force_login(user)
        return client.post(reverse("billing:top_up"), {"amount": amount}, **extra)

    return post


@pytest.fixture
def pending(organization):
    """A pending payment of ¥200.00 whose Checkout session is open."""
    wallet = Wallet.objects.get(organization=organization)
    return PaymentFactory(wallet=wallet, amount_minor=20_000, stripe_checkout_session_id="cs_1")


def balance(organization) -> int:
    return Wallet.objects.get(organization=organization).balance_minor


# --- Starting a top-up ----------------------------------------------------------------------


def test_a_top_up_redirects_to_the_checkout_session(top_up, owner, organization, fake_stripe):
    response = top_up(owner, "123.45")
    (request,) = fake_stripe.requests
    payment = Payment.objects.get()
    session = fake_stripe.sessions[payment.stripe_checkout_session_id]
    assert response.status_code == 302
    assert response["Location"] == session["url"]
    assert (payment.state, payment.amount_minor, payment.currency) == (
        PaymentState.PENDING,
        12_345,
        "CNY",
    )
    assert payment.wallet.organization == organization
    assert payment.completed_at is None
    assert (request.method, request.path) == ("POST", "/v1/checkout/sessions")
    assert request.headers["authorization"] == f"Bearer {STRIPE_SECRET_KEY}"
    assert request.idempotency_key == f"loam-payment-{payment.pk}"
    params = request.params
    assert params["mode"] == "payment"
    assert params["client_reference_id"] == str(payment.pk)
    assert params["metadata[payment]"] == str(payment.pk)
    assert params["metadata[organization]"] == str(organization.pk)
    assert params["line_items[0][quantity]"] == "1"
    assert params["line_items[0][price_data][currency]"] == "cny"
    assert params["line_items[0][price_data][unit_amount]"] == "12345"
    assert params["success_url"] == "http://testserver/billing/?top_up=success"
    assert params["cancel_url"] == "http://testserver/billing/?top_up=cancelled"
    assert session["amount_total"] == 12_345
    # Nothing is credited before Stripe confirms the payment.
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert not LedgerEntry.objects.exists()


def test_a_billing_member_tops_up(top_up, billing, fake_stripe):
    assert top_up(billing, "10").status_code == 302
    assert Payment.objects.get().amount_minor == 1000


@pytest.mark.parametrize("role", ["admin", "member", "viewer"])
def test_other_roles_cannot_top_up(top_up, organization, member_of, fake_stripe, role):
    assert top_up(member_of(organization, role)).status_code == 403
    assert not fake_stripe.requests and not Payment.objects.exists()


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        ("9.99", "Top up between ¥10.00 and ¥1,000,000.00."),
        ("1000000.01", "Top up between ¥10.00 and ¥1,000,000.00."),
        ("-5", "Ensure this value is greater than or equal to 0.01."),
        ("lots", "Enter a number."),
        ("", "This field is required."),
    ],
)
def test_a_bad_amount_is_refused_before_stripe(top_up, owner, fake_stripe, amount, message):
    response = top_up(owner, amount, follow=True)
    assert response.status_code == 200
    assert messages_of(response) == [message]
    assert not fake_stripe.requests and not Payment.objects.exists()


@pytest.mark.parametrize(
    ("status", "retry"), [(400, False), (402, False), (500, False), (500, None)]
)
def test_a_stripe_error_fails_the_payment_and_credits_nothing(
    top_up, owner, organization, fake_stripe, status, retry
):
    fake_stripe.fail_next(status, message="No such price", retry=retry)
    response = top_up(owner, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(reverse("billing:overview"), 302)]
    assert messages_of(response) == [
        "The payment provider did not accept the request; nothing was charged. Try again."
    ]
    assert len(fake_stripe.session_requests()) == 1
    payment = Payment.objects.get()
    assert (payment.state, payment.stripe_checkout_session_id) == (PaymentState.FAILED, "")
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert not LedgerEntry.objects.exists()


def test_without_stripe_configured_the_page_says_so(english_client, owner, settings, fake_stripe):
    settings.STRIPE_ENABLED = False
    client = english_client
    client.force_login(owner)
    response = client.post(reverse("billing:top_up"), {"amount": "100"}, follow=True)
    assert messages_of(response) == [
        "Online payment is not configured on this portal; ask the park's operators."
    ]
    assert not Payment.objects.exists() and not fake_stripe.requests


def test_the_return_pages_say_what_happens_next(english_client, owner):
    client = english_client
    client.force_login(owner)
    response = client.get(reverse("billing:overview"), {"top_up": "success"})
    assert messages_of(response) == [
        "Thank you: the balance is credited as soon as Stripe confirms the payment."
    ]
    response = client.get(reverse("billing:overview"), {"top_up": "cancelled"})
    assert messages_of(response) == ["The top-up was cancelled; nothing was charged."]


# --- Webhooks: what is refused --------------------------------------------------------------


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda body: signature(body, "whsec_someone_else"), id="other-secret"),
        pytest.param(lambda body: signature(body + " "), id="other-payload"),
        pytest.param(lambda body: signature(body, at=int(time.time()) - 3600), id="too-old"),
        pytest.param(lambda body: "t=1,v1=00", id="garbage"),
        pytest.param(lambda body: "", id="missing"),
    ],
)
def test_a_bad_signature_is_refused_and_credits_nothing(post_event, pending, organization, forge):
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    body = json.dumps(event)
    response = post_event(event, header=forge(body), payload=body)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "invalid_stripe_event"
    assert Payment.objects.get().state == PaymentState.PENDING
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert not StripeEvent.objects.exists() and not LedgerEntry.objects.exists()


def test_a_payload_that_is_not_json_is_refused(post_event, pending):
    response = post_event(None, payload="not json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_stripe_event"


def test_the_webhook_accepts_only_post(client, stripe_settings):
    assert client.get(reverse("billing:stripe_webhook")).status_code == 405


def test_webhooks_without_a_secret_configured_are_refused(post_event, pending, settings):
    settings.STRIPE_WEBHOOK_SECRET = ""
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    response = post_event(event)
    assert response.status_code == 400
    assert response.json()["error"] == "payments_unavailable"
    assert not StripeEvent.objects.exists()


def test_unknown_event_types_are_acknowledged_and_ignored(post_event, pending, organization):
    event = stripe_event("customer.created", {"id": "cus_1", "object": "customer"})
    response = post_event(event)
    assert response.status_code == 200
    assert response.json() == {"received": True, "outcome": "ignored"}
    assert StripeEvent.objects.get().event_id == event["id"]
    assert balance(organization) == FUNDED_BALANCE_MINOR


# --- Webhooks: sessions that end without money ----------------------------------------------


def test_an_expired_session_cancels_the_payment(post_event, pending, organization):
    event = stripe_event("checkout.session.expired", checkout_session(pending, status="expired"))
    response = post_event(event)
    assert response.json() == {"received": True, "outcome": "processed"}
    pending.refresh_from_db()
    assert pending.state == PaymentState.CANCELLED and pending.completed_at is not None
    assert balance(organization) == FUNDED_BALANCE_MINOR


def test_an_async_payment_failure_fails_the_payment(post_event, pending, organization):
    session = checkout_session(pending, payment_status="unpaid")
    response = post_event(stripe_event("checkout.session.async_payment_failed", session))
    assert response.status_code == 200
    assert Payment.objects.get().state == PaymentState.FAILED
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert not LedgerEntry.objects.exists()


def test_the_same_event_twice_is_processed_once(post_event, pending):
    event = stripe_event("checkout.session.expired", checkout_session(pending))
    assert post_event(event).json()["outcome"] == "processed"
    assert post_event(event).json() == {"received": True, "outcome": "duplicate"}
    assert StripeEvent.objects.count() == 1


# --- Webhooks: money received ---------------------------------------------------------------


def test_a_completed_session_credits_the_wallet_once(post_event, pending, organization):
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    response = post_event(event)
    assert response.json() == {"received": True, "outcome": "processed"}
    pending.refresh_from_db()
    assert pending.state == PaymentState.SUCCEEDED
    assert pending.stripe_payment_intent_id == f"pi_test_{pending.pk}"
    assert pending.completed_at is not None
    entry = LedgerEntry.objects.get()
    assert (entry.kind, entry.amount_minor) == (EntryKind.TOP_UP, 20_000)
    assert entry.balance_after_minor == FUNDED_BALANCE_MINOR + 20_000 == balance(organization)
    assert "cs_1" in entry.description


def test_a_replayed_completed_event_credits_once(post_event, pending, organization):
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    post_event(event)
    assert post_event(event).json()["outcome"] == "duplicate"
    # Stripe may also send the same news as a second event: still credited once.
    post_event(stripe_event("checkout.session.completed", checkout_session(pending)))
    assert LedgerEntry.objects.filter(kind=EntryKind.TOP_UP).count() == 1
    assert balance(organization) == FUNDED_BALANCE_MINOR + 20_000


def test_expired_after_completed_keeps_it_paid(post_event, pending, organization):
    post_event(stripe_event("checkout.session.completed", checkout_session(pending)))
    post_event(stripe_event("checkout.session.expired", checkout_session(pending)))
    assert Payment.objects.get().state == PaymentState.SUCCEEDED
    assert LedgerEntry.objects.filter(kind=EntryKind.TOP_UP).count() == 1
    assert balance(organization) == FUNDED_BALANCE_MINOR + 20_000


def test_completed_after_expired_is_still_credited(post_event, pending, organization):
    post_event(stripe_event("checkout.session.expired", checkout_session(pending)))
    assert Payment.objects.get().state == PaymentState.CANCELLED
    post_event(stripe_event("checkout.session.completed", checkout_session(pending)))
    assert Payment.objects.get().state == PaymentState.SUCCEEDED
    assert LedgerEntry.objects.filter(kind=EntryKind.TOP_UP).count() == 1
    assert balance(organization) == FUNDED_BALANCE_MINOR + 20_000


def test_an_async_payment_succeeds_after_completion_unpaid(post_event, pending, organization):
    unpaid = checkout_session(pending, payment_status="unpaid")
    post_event(stripe_event("checkout.session.completed", unpaid))
    assert Payment.objects.get().state == PaymentState.PENDING
    assert balance(organization) == FUNDED_BALANCE_MINOR
    paid = checkout_session(pending, payment_status="paid")
    post_event(stripe_event("checkout.session.async_payment_succeeded", paid))
    assert Payment.objects.get().state == PaymentState.SUCCEEDED
    assert balance(organization) == FUNDED_BALANCE_MINOR + 20_000


def test_a_session_found_by_its_reference_before_its_id_was_saved(
    post_event, organization, pending
):
    Payment.objects.filter(pk=pending.pk).update(stripe_checkout_session_id="")
    post_event(stripe_event("checkout.session.completed", checkout_session(pending, id="cs_9")))
    payment = Payment.objects.get()
    assert (payment.state, payment.stripe_checkout_session_id) == (PaymentState.SUCCEEDED, "cs_9")
    assert balance(organization) == FUNDED_BALANCE_MINOR + 20_000


def test_a_session_paid_in_another_currency_is_not_credited(post_event, pending, organization):
    post_event(
        stripe_event("checkout.session.completed", checkout_session(pending, currency="usd"))
    )
    assert Payment.objects.get().state == PaymentState.PENDING
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert StripeEvent.objects.count() == 1


def test_the_whole_top_up_through_the_fake_stripe(top_up, owner, organization, post_event):
    """The session the fake Stripe made, completed: the amount Stripe reports is credited."""
    top_up(owner, "250")
    payment = Payment.objects.get()
    post_event(stripe_event("checkout.session.completed", checkout_session(payment)))
    assert Payment.objects.get().state == PaymentState.SUCCEEDED
    assert balance(organization) == FUNDED_BALANCE_MINOR + 25_000


# --- A top-up resumes the hosts stopped for funds -------------------------------------------


@pytest.fixture
def suspended(clock, world, running_host, meter):
    """A host stopped because its wallet ran out."""
    WalletFactory(organization=world.organization, balance_minor=1500)
    host = running_host(1, data_disk_gb=7, bandwidth_mbps=3)
    clock.shift(5400)
    meter()
    host.refresh_from_db()
    assert host.state == InstanceState.STOPPED
    return host


def test_a_webhook_top_up_resumes_the_suspended_host(suspended, world, post_event):
    wallet = Wallet.objects.get(organization=world.organization)
    payment = PaymentFactory(wallet=wallet, amount_minor=50_000)
    post_event(stripe_event("checkout.session.completed", checkout_session(payment)))
    assert Instance.objects.get(pk=suspended.pk).state == InstanceState.RUNNING
    assert FundsSuspension.objects.get(workload__instance=suspended).resumed_at is not None
    assert Wallet.objects.get(pk=wallet.pk).balance_minor == -6 + 50_000


# --- Webhooks: malformed or mis-dated events (issue 18) -------------------------------------


@pytest.mark.parametrize(
    "session",
    [
        pytest.param(
            lambda p: {k: v for k, v in checkout_session(p).items() if k != "id"}, id="no-id"
        ),
        pytest.param(lambda p: checkout_session(p, id=""), id="empty-id"),
        pytest.param(lambda p: checkout_session(p, id=None), id="null-id"),
    ],
)
def test_a_completed_session_without_an_id_is_refused(post_event, pending, organization, session):
    response = post_event(stripe_event("checkout.session.completed", session(pending)))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_stripe_event"
    assert Payment.objects.get().state == PaymentState.PENDING
    assert balance(organization) == FUNDED_BALANCE_MINOR
    assert not StripeEvent.objects.exists() and not LedgerEntry.objects.exists()


def test_an_event_without_its_object_is_refused(post_event, pending, organization):
    event = stripe_event("checkout.session.completed", {})
    del event["data"]["object"]
    response = post_event(event)
    assert response.status_code == 400
    assert balance(organization) == FUNDED_BALANCE_MINOR


@pytest.mark.parametrize(
    ("ahead", "status"),
    [(3600, 400), (6 * 60, 400), (4 * 60, 200), (0, 200), (-86_400, 200)],
)
def test_an_event_dated_in_the_future_is_refused(post_event, pending, organization, ahead, status):
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    event["created"] = int(time.time()) + ahead
    response = post_event(event)
    assert response.status_code == status
    credited = FUNDED_BALANCE_MINOR + (20_000 if status == 200 else 0)
    assert balance(organization) == credited
    if status == 400:
        assert response.json()["error"] == "invalid_stripe_event"
        assert not StripeEvent.objects.exists()


def test_an_event_without_a_creation_time_is_refused(post_event, pending, organization):
    event = stripe_event("checkout.session.completed", checkout_session(pending))
    del event["created"]
    assert post_event(event).status_code == 400
    assert balance(organization) == FUNDED_BALANCE_MINOR
