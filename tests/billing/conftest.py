"""Billing fixtures: the orders world (re-exported), a frozen clock, metering, a fake Stripe API
on 127.0.0.1 and signed Stripe webhook events.

The world's prices (tests/orders/conftest.py): a flavor costs 1000 fen an hour per
accelerator, a GB of cloud disk 36 fen a month (0.05 an hour), a Mbps 720 fen a month (1 an
hour). Its accelerator model has 3.12 compute units.
"""

import hashlib
import hmac
import itertools
import json
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.urls import reverse

from tests.billing.stripe_server import FakeStripe
from tests.orders.conftest import (  # noqa: F401  (fixtures used by the billing tests)
    _no_injected_failures,
    english_messages,
    host_request,
    operate,
    order_hosts,
    other_family,
    running_host,
    world,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
# Well after the world's prices take effect (2026-01-01 plus a few minutes), mid-month.
T0 = datetime(2026, 3, 10, 10, 0, tzinfo=SHANGHAI)

STRIPE_SECRET_KEY = "sk_test_loam_billing"
STRIPE_PUBLISHABLE_KEY = "pk_test_loam_billing"
STRIPE_WEBHOOK_SECRET = "whsec_test_loam_billing_0123456789"


def local(*args) -> datetime:
    """An Asia/Shanghai wall-clock instant: local(2026, 4, 1) is 2026-03-31T16:00Z."""
    return datetime(*args, tzinfo=SHANGHAI)


@pytest.fixture
def clock():
    """The clock frozen at T0 (10:00 on 10 March 2026, Shanghai); `clock.shift(seconds)` moves
    it. Request it first, before `world`, so everything the test makes is made in frozen time."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


@pytest.fixture
def travel():
    """travel(moment) freezes the clock at `moment` (for tests that start elsewhere than T0)."""
    travellers = []

    def start(moment):
        traveller = time_machine.travel(moment, tick=False)
        travellers.append(traveller)
        return traveller.start()

    yield start
    for traveller in reversed(travellers):
        traveller.stop()


@pytest.fixture
def meter(django_capture_on_commit_callbacks):
    """meter() runs the periodic metering task now, with what it schedules after commit (stops,
    starts, low-balance mail) run as a worker would; returns what it charged."""
    from apps.billing.tasks import meter_usage

    def run() -> int:
        with django_capture_on_commit_callbacks(execute=True):
            return meter_usage()

    return run


@pytest.fixture
def wallet_of():
    """wallet_of(organization) -> its wallet, fresh from the database."""
    from apps.billing.models import Wallet

    return lambda organization: Wallet.objects.get(organization=organization)


@pytest.fixture
def english_client(client):
    client.cookies["django_language"] = "en"
    return client


# --- Stripe -----------------------------------------------------------------------------------


@pytest.fixture
def fake_stripe():
    server = FakeStripe().start()
    yield server
    server.stop()


@pytest.fixture
def stripe_settings(settings, fake_stripe, monkeypatch):
    """Stripe configured (test keys) and pointed at the fake API."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    settings.STRIPE_SECRET_KEY = STRIPE_SECRET_KEY
    settings.STRIPE_PUBLISHABLE_KEY = STRIPE_PUBLISHABLE_KEY
    settings.STRIPE_WEBHOOK_SECRET = STRIPE_WEBHOOK_SECRET
    settings.STRIPE_API_BASE = fake_stripe.url
    settings.STRIPE_ENABLED = True
    return settings


_event_ids = itertools.count(1)


def stripe_event(event_type: str, session: dict, *, event_id: str | None = None) -> dict:
    return {
        "id": event_id or f"evt_test_{next(_event_ids):06d}",
        "object": "event",
        "api_version": "2025-01-27.acacia",
        "created": int(time.time()),
        "livemode": False,
        "type": event_type,
        "data": {"object": session},
    }


def checkout_session(payment, *, payment_status="paid", **fields) -> dict:
    """The checkout.session object Stripe sends in events about `payment`."""
    return {
        "id": payment.stripe_checkout_session_id,
        "object": "checkout.session",
        "amount_total": payment.amount_minor,
        "currency": payment.currency.lower(),
        "client_reference_id": str(payment.pk),
        "metadata": {"payment": str(payment.pk)},
        "mode": "payment",
        "payment_intent": f"pi_test_{payment.pk}",
        "payment_status": payment_status,
        "status": "complete",
        **fields,
    }


def signature(payload: str, secret: str = STRIPE_WEBHOOK_SECRET, *, at: int | None = None) -> str:
    """The Stripe-Signature header Stripe would send for `payload`."""
    at = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{at}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={at},v1={digest}"


@pytest.fixture
def post_event(client, stripe_settings, django_capture_on_commit_callbacks):
    """post_event(event, secret=..., header=None) POSTs a signed event to the webhook URL, with
    what it schedules after commit (resuming hosts) run; returns the response."""

    def post(event, *, secret=STRIPE_WEBHOOK_SECRET, header=None, payload=None):
        body = payload if payload is not None else json.dumps(event)
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(
                reverse("billing:stripe_webhook"),
                data=body,
                content_type="application/json",
                HTTP_STRIPE_SIGNATURE=header if header is not None else signature(body, secret),
            )

    return post
