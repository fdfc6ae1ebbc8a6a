"""Top-ups through Stripe Checkout, and Stripe's webhook events that complete them.

The wallet is credited only from a verified webhook event, in the transaction that records the
payment; each event id is processed once, so replays and retries are harmless, and events in any
order end in the same state.
"""

import logging
from datetime import timedelta

import stripe
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import PAYMENT_TRANSITIONS, EntryKind, Payment, PaymentState, StripeEvent
from apps.billing.services import credit, locked_wallet, wallet_of
from apps.core.errors import DomainError
from apps.core.money import MINOR_PER_MAJOR, format_money
from apps.core.numbers import parse_id
from apps.core.transitions import transition
from apps.tenants.access import authorize
from apps.tenants.roles import Action

log = logging.getLogger(__name__)

MIN_TOP_UP_MAJOR = 10
MAX_TOP_UP_MAJOR = 1_000_000
# An event Stripe says it created further ahead of our clock than this is refused: clocks drift
# by seconds, not minutes, and a future date would let a captured event outlive its signature.
MAX_EVENT_CLOCK_SKEW = timedelta(minutes=5)


class PaymentsUnavailable(DomainError):
    code = "payments_unavailable"
    status = 503


class InvalidStripeEvent(DomainError):
    code = "invalid_stripe_event"
    status = 400


def stripe_client() -> stripe.StripeClient:
    if not settings.STRIPE_ENABLED:
        raise PaymentsUnavailable(
            _("Online payment is not configured on this portal; ask the park's operators.")
        )
    base = {"api": settings.STRIPE_API_BASE} if settings.STRIPE_API_BASE else {}
    return stripe.StripeClient(settings.STRIPE_SECRET_KEY, base_addresses=base)


def _check_amount(amount_minor: int, currency: str) -> None:
    per_major = MINOR_PER_MAJOR[currency]
    low, high = MIN_TOP_UP_MAJOR * per_major, MAX_TOP_UP_MAJOR * per_major
    if not low <= amount_minor <= high:
        raise ValidationError(
            {
                "amount": _("Top up between %(low)s and %(high)s.")
                % {"low": format_money(low, currency), "high": format_money(high, currency)}
            }
        )


def start_top_up(
    *, organization, actor, amount_minor: int, success_url: str, cancel_url: str
) -> tuple[Payment, str]:
    """Create a pending payment and its Checkout session; returns it and the URL to pay at.

    The payment row is committed before Stripe is called, so a session always has its row;
    Stripe's idempotency key is the row, so a retried call makes one session.
    """
    authorize(actor, organization, Action.MANAGE_BILLING)
    client = stripe_client()
    wallet = wallet_of(organization)
    _check_amount(amount_minor, wallet.currency)
    payment = Payment.objects.create(
        wallet=wallet, amount_minor=amount_minor, currency=wallet.currency
    )
    try:
        session = client.v1.checkout.sessions.create(
            params={
                "mode": "payment",
                "client_reference_id": str(payment.pk),
                "metadata": {"payment": str(payment.pk), "organization": str(organization.pk)},
                "line_items": [
                    {
                        "quantity": 1,
                        "price_data": {
                            "currency": wallet.currency.lower(),
                            "unit_amount": amount_minor,
                            "product_data": {"name": _("Loam wallet top-up")},
                        },
                    }
                ],
                "success_url": success_url,
                "cancel_url": cancel_url,
            },
            options={"idempotency_key": f"loam-payment-{payment.pk}"},
        )
    except stripe.StripeError as error:
        log.warning("Stripe refused checkout for payment %s: %s", payment.pk, error)
        with transaction.atomic():
            transition(payment, PaymentState.FAILED, table=PAYMENT_TRANSITIONS, actor=actor)
        raise DomainError(
            _("The payment provider did not accept the request; nothing was charged. Try again."),
            code="payment_provider_error",
            status=502,
        ) from error
    Payment.objects.filter(pk=payment.pk).update(stripe_checkout_session_id=session.id)
    payment.stripe_checkout_session_id = session.id
    return payment, session.url


def handle_webhook(payload: bytes, signature: str) -> str:
    """Verify and process one Stripe event; returns "processed", "duplicate" or "ignored"."""
    if not settings.STRIPE_WEBHOOK_SECRET:
        raise PaymentsUnavailable(_("Stripe webhooks are not configured."))
    try:
        event = stripe.Webhook.construct_event(payload, signature, settings.STRIPE_WEBHOOK_SECRET)
    except (ValueError, stripe.SignatureVerificationError) as error:
        raise InvalidStripeEvent(_("The Stripe signature or payload is not valid.")) from error
    _check_created(event)
    handler = HANDLERS.get(event.type)
    obj = None
    if handler is not None:
        # StripeObject is not a dict (stripe >= 15): handlers read a plain copy.
        try:
            obj = event.data.object.to_dict()
        except AttributeError as error:
            raise InvalidStripeEvent(_("The Stripe signature or payload is not valid.")) from error
    with transaction.atomic():
        try:
            with transaction.atomic():
                StripeEvent.objects.create(event_id=event.id, type=event.type)
        except IntegrityError:
            return "duplicate"
        if handler is None:
            return "ignored"
        handler(obj)
    return "processed"


def _check_created(event) -> None:
    """Refuse an event without a creation time or dated too far in the future."""
    created = getattr(event, "created", None)
    if not isinstance(created, int) or isinstance(created, bool):
        raise InvalidStripeEvent(_("The Stripe event has no valid creation time."))
    latest = (timezone.now() + MAX_EVENT_CLOCK_SKEW).timestamp()
    if created > latest:
        raise InvalidStripeEvent(_("The Stripe event is dated in the future."))


def _check_session(session) -> None:
    """A checkout session event must name its session; otherwise the event is refused (400) and,
    as the transaction rolls back, not recorded: nothing is credited."""
    session_id = session.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidStripeEvent(_("The Stripe event's checkout session has no id."))


def _payment_for(session) -> Payment | None:
    _check_session(session)
    payment = (
        Payment.objects.select_for_update(no_key=True)
        .filter(stripe_checkout_session_id=session["id"])
        .first()
    )
    if payment is None:
        # The webhook can arrive before the session id was saved on the row.
        reference = parse_id(session.get("client_reference_id") or "")
        if reference is not None:
            payment = Payment.objects.select_for_update(no_key=True).filter(pk=reference).first()
    if payment is None:
        log.warning("Stripe session %s matches no payment", session["id"])
    return payment


def _paid(session) -> None:
    payment = _payment_for(session)
    if payment is None or payment.state == PaymentState.SUCCEEDED:
        return
    if session.get("payment_status") not in ("paid", "no_payment_required"):
        return  # an asynchronous method: async_payment_succeeded follows
    amount = session.get("amount_total") or payment.amount_minor
    currency = (session.get("currency") or payment.currency).upper()
    if currency != payment.currency:
        log.error("Stripe session %s paid in %s, not %s", session["id"], currency, payment.currency)
        return
    wallet = locked_wallet(payment.wallet.organization_id)
    transition(
        payment,
        PaymentState.SUCCEEDED,
        table=PAYMENT_TRANSITIONS,
        changes={
            "amount_minor": amount,
            "stripe_checkout_session_id": session["id"],
            "stripe_payment_intent_id": session.get("payment_intent") or "",
            "completed_at": timezone.now(),
        },
    )
    credit(
        wallet, amount_minor=amount, kind=EntryKind.TOP_UP, description=f"Stripe {session['id']}"
    )


def _ended(state):
    def handle(session) -> None:
        payment = _payment_for(session)
        if payment is not None and payment.state == PaymentState.PENDING:
            transition(
                payment, state, table=PAYMENT_TRANSITIONS, changes={"completed_at": timezone.now()}
            )

    return handle


HANDLERS = {
    "checkout.session.completed": _paid,
    "checkout.session.async_payment_succeeded": _paid,
    "checkout.session.async_payment_failed": _ended(PaymentState.FAILED),
    "checkout.session.expired": _ended(PaymentState.CANCELLED),
}
