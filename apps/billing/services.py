"""Wallets: holds, charges, top-ups, credit, and what happens when the money runs out."""

import logging
from collections import defaultdict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.billing.models import (
    BillingMode,
    EntryKind,
    Hold,
    LedgerEntry,
    Meter,
    Wallet,
)
from apps.core import sql
from apps.core.audit import record_event
from apps.core.bulk import update_rows
from apps.core.errors import DomainError
from apps.core.extensions import ExtensionPoint
from apps.core.models import AuditEvent
from apps.core.money import format_money
from apps.core.transactions import in_transaction, lock_all, locked_where, on_commit_task
from apps.tenants.access import SystemActor, require_operator
from apps.tenants.models import Organization, Role

log = logging.getLogger(__name__)

BILLING_ACTOR = SystemActor("billing")

# Hosts are the orders app's, a floor above: it plugs in how to stop an organization's running
# hosts when its wallet runs out, and how to start the ones stopped for funds once it can pay.
# Each is a callable (organization id) -> how many hosts it stopped or started.
SUSPEND_HOSTS = ExtensionPoint("stop an organization's hosts for funds")
RESUME_HOSTS = ExtensionPoint("start the hosts stopped for funds")


class InsufficientFunds(DomainError):
    code = "insufficient_funds"
    status = 402


def wallet_of(organization: Organization) -> Wallet:
    wallet, _created = Wallet.objects.get_or_create(
        organization=organization, defaults={"currency": organization.park.currency}
    )
    return wallet


def locked_wallet(organization_id: int) -> Wallet:
    """The organization's wallet under a row lock (created on first use)."""
    wallet = locked_where(Wallet, "organization_id", organization_id)
    if wallet is None:
        wallet_of(Organization.objects.select_related("park").get(pk=organization_id))
        wallet = locked_where(Wallet, "organization_id", organization_id)
    return wallet


def locked_wallets(organization_ids: list[int]) -> list[Wallet]:
    """The organizations' wallets under row locks (created on first use), locked in the order
    of their organizations, so that two callers locking overlapping sets never deadlock."""
    locked = (
        Wallet.objects.select_for_update(no_key=True)
        .filter(organization_id__in=organization_ids)
        .order_by("organization_id")
    )
    wallets = list(locked)
    missing = set(organization_ids) - {wallet.organization_id for wallet in wallets}
    if missing:
        for organization in Organization.objects.select_related("park").filter(pk__in=missing):
            wallet_of(organization)
        wallets = list(locked)
    return wallets


def funds_needed(amount_minor: int) -> int:
    """What must be available to start something that holds `amount_minor`: at least one minor
    unit, so an empty wallet starts nothing, not even a free host."""
    return max(amount_minor, 1)


def require_funds(organization: Organization, amount_minor: int) -> Wallet:
    """The locked wallet, if it can spend `amount_minor` more; otherwise say what is missing."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("require_funds() must run inside the caller's transaction")
    wallet = locked_wallet(organization.pk)
    if wallet.available_minor < funds_needed(amount_minor):
        raise InsufficientFunds(
            _(
                "Not enough balance: this needs %(needed)s available and %(available)s is. "
                "Top up the wallet to continue."
            )
            % {
                "needed": format_money(funds_needed(amount_minor), wallet.currency),
                "available": format_money(wallet.available_minor, wallet.currency),
            }
        )
    return wallet


def hold(wallet: Wallet, *, instance, amount_minor: int) -> Hold:
    """Hold the first hour of `instance` on the (locked) wallet."""
    wallet.held_minor += amount_minor
    held = Hold(wallet=wallet, workload_id=instance.workload_id, amount_minor=amount_minor)
    # The wallet's new figure with the hold: one statement on PostgreSQL (every order holds).
    sql.insert_together(
        held,
        along=[
            (
                f"UPDATE {Wallet._meta.db_table} SET held_minor = %s WHERE id = %s",
                [wallet.held_minor, wallet.pk],
            )
        ],
    )
    return held


@in_transaction
def lock_money_of(instance) -> None:
    """After the host, and before any node: the rows of money its use case may change, in
    LOCK_ORDER. The wallet, the host's hold, then its open meters. Metering takes them in that
    order too, and a host's use case that took a meter first and then the wallet (to give its
    hold back, or to check funds) waited on a metering pass that waited on it."""
    locked_wallet(instance.organization_id)
    lock_all(
        Hold,
        Hold.objects.filter(workload_id=instance.workload_id, amount_minor__gt=0).values_list(
            "pk", flat=True
        ),
    )
    lock_all(
        Meter,
        Meter.objects.filter(workload_id=instance.workload_id, ended_at__isnull=True).values_list(
            "pk", flat=True
        ),
    )


@in_transaction
def release_hold(instance) -> None:
    """Give back what is still held for `instance` (it is gone, or was never provisioned)."""
    held = Hold.objects.filter(workload_id=instance.workload_id, amount_minor__gt=0).first()
    if held is None:
        return
    wallet = locked_wallet(instance.organization_id)
    held = Hold.objects.select_for_update(no_key=True).get(pk=held.pk)
    wallet.held_minor -= held.amount_minor
    wallet.save(update_fields=["held_minor", "updated_at"])
    held.amount_minor = 0
    held.save(update_fields=["amount_minor"])


def charge(
    wallet: Wallet, *, amount_minor: int, by_workload: dict[int, int], holds: list[Hold]
) -> LedgerEntry | None:
    """Take metered usage from the (locked) wallet, in memory: a host's charges (`by_workload`,
    by its workload's id) use its hold among the wallet's locked `holds` first. Returns the
    ledger entry to write, or None when nothing is owed; `charge_wallets` writes them all at
    once."""
    if amount_minor <= 0:
        return None
    for held in holds:
        used = min(held.amount_minor, by_workload.get(held.workload_id, 0))
        held.amount_minor -= used
        wallet.held_minor -= used
    wallet.balance_minor -= amount_minor
    return LedgerEntry(
        wallet=wallet,
        kind=EntryKind.CHARGE,
        amount_minor=-amount_minor,
        balance_after_minor=wallet.balance_minor,
    )


def locked_holds(wallets: list[Wallet]) -> list[Hold]:
    """The (locked) wallets' holds with money left, locked in id order: after the wallets and
    before any meter (apps.core.transactions.LOCK_ORDER)."""
    return list(
        Hold.objects.select_for_update(no_key=True)
        .filter(wallet__in=wallets, amount_minor__gt=0)
        .order_by("pk")
    )


def charge_wallets(
    wallets: list[Wallet],
    *,
    holds: list[Hold],
    amounts: dict[int, int],
    by_workload: dict[int, int],
) -> None:
    """Take metered usage from the (locked) wallets, `amounts` by organization, one ledger entry
    each, in a fixed number of queries however many wallets: an instance's charges
    (`by_workload`) use its hold first (`holds`: the wallets' `locked_holds`)."""
    holds_of = defaultdict(list)
    held_before = {}
    for held in holds:
        holds_of[held.wallet_id].append(held)
        held_before[held.pk] = held.amount_minor
    entries = []
    for wallet in wallets:
        entry = charge(
            wallet,
            amount_minor=amounts.get(wallet.organization_id, 0),
            by_workload=by_workload,
            holds=holds_of[wallet.pk],
        )
        if entry is not None:
            entries.append(entry)
    drawn = [
        held
        for wallet_holds in holds_of.values()
        for held in wallet_holds
        if held.amount_minor != held_before[held.pk]
    ]
    update_rows(Hold, drawn, ["amount_minor"])
    now = timezone.now()
    for entry in entries:
        entry.wallet.updated_at = now
    update_rows(
        Wallet, [entry.wallet for entry in entries], ["balance_minor", "held_minor", "updated_at"]
    )
    LedgerEntry.objects.bulk_create(entries)


def credit(wallet: Wallet, *, amount_minor: int, kind: str, description: str = "") -> LedgerEntry:
    """Add money to the (locked) wallet; hosts stopped for funds resume after commit."""
    from apps.billing.invoicing import settle_invoices

    wallet.balance_minor += amount_minor
    wallet.save(update_fields=["balance_minor", "updated_at"])
    entry = LedgerEntry.objects.create(
        wallet=wallet,
        kind=kind,
        amount_minor=amount_minor,
        balance_after_minor=wallet.balance_minor,
        description=description[:200],
    )
    settle_invoices(wallet)
    _resume_after_commit(wallet.organization_id)
    return entry


def _resume_after_commit(organization_id: int) -> None:
    from apps.billing.tasks import resume_suspended

    on_commit_task(resume_suspended, organization_id)


# --- Operators: credit terms and adjustments ------------------------------------------------


@transaction.atomic(durable=True)
def set_billing_terms(
    *, organization: Organization, operator, mode: str, credit_limit_minor: int
) -> Wallet:
    """Prepaid, or postpaid up to a credit limit (verified enterprises only)."""
    require_operator(
        operator, organization.park, _("Only this park's operators may change billing terms.")
    )
    if mode not in BillingMode.values:
        raise ValidationError({"mode": _("Choose prepaid or postpaid.")})
    if credit_limit_minor < 0:
        raise ValidationError({"credit_limit_minor": _("A credit limit cannot be negative.")})
    if mode == BillingMode.POSTPAID and not organization.is_verified:
        raise DomainError(
            _("Only verified enterprises can be postpaid."), code="not_verified", status=422
        )
    if mode == BillingMode.PREPAID and credit_limit_minor:
        raise ValidationError({"credit_limit_minor": _("A prepaid wallet has no credit limit.")})
    wallet = locked_wallet(organization.pk)
    before = {"mode": wallet.mode, "credit_limit_minor": wallet.credit_limit_minor}
    wallet.mode, wallet.credit_limit_minor = mode, credit_limit_minor
    wallet.save(update_fields=["mode", "credit_limit_minor", "updated_at"])
    record_event(
        action="billing.terms_changed",
        actor=operator,
        target=wallet,
        organization=organization,
        data={"before": before, "after": {"mode": mode, "credit_limit_minor": credit_limit_minor}},
    )
    if wallet.available_minor > 0:
        _resume_after_commit(organization.pk)
    return wallet


@transaction.atomic(durable=True)
def adjust_balance(
    *, organization: Organization, operator, amount_minor: int, reason: str
) -> LedgerEntry:
    """A manual credit or debit by an operator (a goodwill credit, a bank transfer received)."""
    require_operator(
        operator, organization.park, _("Only this park's operators may change billing terms.")
    )
    if not amount_minor:
        raise ValidationError({"amount_minor": _("Enter an amount other than zero.")})
    if not reason.strip():
        raise ValidationError({"reason": _("Say why the balance is adjusted.")})
    wallet = locked_wallet(organization.pk)
    entry = credit(
        wallet, amount_minor=amount_minor, kind=EntryKind.ADJUSTMENT, description=reason.strip()
    )
    record_event(
        action="billing.balance_adjusted",
        actor=operator,
        target=wallet,
        organization=organization,
        data={"amount_minor": amount_minor, "reason": reason.strip()},
    )
    return entry


# --- Low balance and running out -----------------------------------------------------------


def burn_rate_minor(organization_id: int):
    """What the organization's open meters cost per hour now."""
    return (
        Meter.objects.filter(organization_id=organization_id, ended_at__isnull=True).aggregate(
            rate=Sum("hourly_minor")
        )["rate"]
        or 0
    )


def _billing_contacts(organization: Organization) -> list[str]:
    return list(
        organization.memberships.filter(role__in=[Role.OWNER, Role.BILLING])
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )


def _balance_is_low(wallet: Wallet, burn_rate) -> bool:
    """Nothing left to spend, or less than LOAM_LOW_BALANCE_HOURS at `burn_rate` an hour."""
    threshold = burn_rate * settings.LOAM_LOW_BALANCE_HOURS
    return wallet.available_minor <= 0 or bool(burn_rate and wallet.available_minor < threshold)


def balance_needs_enforcing(wallet: Wallet, *, burn_rate) -> bool:
    """Whether `enforce_balance` would act on `wallet` now (warn, withdraw the warning, or stop
    the hosts), so that metering calls it only for the organizations it concerns."""
    low = _balance_is_low(wallet, burn_rate)
    return low != (wallet.low_balance_warned_at is not None) or wallet.available_minor <= 0


def enforce_balance(organization_id: int) -> None:
    """After metering: warn once when the balance runs low, stop the hosts when it runs out."""
    with transaction.atomic():
        wallet = locked_wallet(organization_id)
        low = _balance_is_low(wallet, burn_rate_minor(organization_id))
        if low and wallet.low_balance_warned_at is None:
            wallet.low_balance_warned_at = timezone.now()
            wallet.save(update_fields=["low_balance_warned_at", "updated_at"])
            _warn_low_balance(wallet)
        elif not low and wallet.low_balance_warned_at is not None:
            wallet.low_balance_warned_at = None
            wallet.save(update_fields=["low_balance_warned_at", "updated_at"])
        exhausted = wallet.available_minor <= 0
    if exhausted:
        SUSPEND_HOSTS.one()(organization_id)


# --- The monthly spend quota -----------------------------------------------------------------

SPEND_WARNING_PERCENT = 80
SPEND_LEVELS = (SPEND_WARNING_PERCENT, 100)


def spend_limited(organization_ids: list[int]) -> list[int]:
    """Which of the organizations have a monthly spend limit (`enforce_spend_quota` concerns
    only those)."""
    from apps.quotas.models import QuotaLimit, QuotaResource

    return sorted(
        QuotaLimit.objects.filter(
            organization_id__in=organization_ids, resource=QuotaResource.MONTHLY_SPEND
        ).values_list("organization_id", flat=True)
    )


def enforce_spend_quota(organization_id: int, *, now=None) -> int | None:
    """After metering: warn once when the month's spend reaches 80 % of the organization's
    monthly spend limit, and once when it reaches 100 % (from then on quotas.reserve refuses
    new orders until the next month or a higher limit; running hosts keep running).

    Each notice is an audit event keyed by month, limit and level, written under the wallet's
    lock, so concurrent or repeated metering sends it once; raising the limit re-arms them.
    Returns the level announced now, if any."""
    from apps.billing.selectors import month_spend
    from apps.quotas.models import QuotaLimit, QuotaResource

    with transaction.atomic():
        limit = (
            QuotaLimit.objects.filter(
                organization_id=organization_id, resource=QuotaResource.MONTHLY_SPEND
            )
            .select_related("organization__park")
            .first()
        )
        if limit is None:
            return None
        wallet = locked_wallet(organization_id)
        now = now or timezone.now()
        spent = month_spend(Organization.objects.filter(pk=organization_id), now=now)
        reached = [
            level for level in SPEND_LEVELS if spent > 0 and spent * 100 >= level * limit.limit
        ]
        if not reached:
            return None
        month = timezone.localtime(now).strftime("%Y-%m")
        announced = set(
            AuditEvent.objects.filter(
                organization_id=organization_id,
                action="billing.spend_quota",
                data__month=month,
                data__limit_minor=limit.limit,
            ).values_list("data__level", flat=True)
        )
        level = max(reached)
        if level in announced or (level < 100 and 100 in announced):
            return None
        _announce_spend(wallet, limit, level=level, spent=spent, month=month)
        return level


def _announce_spend(wallet: Wallet, limit, *, level: int, spent: int, month: str) -> None:
    organization = limit.organization
    recipients = _billing_contacts(organization)
    record_event(
        action="billing.spend_quota",
        target=limit,
        organization=organization,
        data={
            "month": month,
            "level": level,
            "limit_minor": limit.limit,
            "spent_minor": spent,
            "notified": len(recipients),
        },
    )
    if not recipients:
        return
    values = {
        "organization": organization,
        "spent": format_money(spent, wallet.currency),
        "limit": format_money(limit.limit, wallet.currency),
        "percent": level,
        "url": f"{settings.LOAM_BASE_URL}/org/quotas/",
    }
    if level >= 100:
        subject = _("Loam: %(organization)s reached its monthly spend limit") % values
        body = _(
            "%(organization)s has spent %(spent)s this month, its monthly spend limit of "
            "%(limit)s. New orders are refused until next month or until the park's operators "
            "raise the limit; running hosts keep running and are still charged. See %(url)s"
        )
    else:
        subject = _("Loam: %(organization)s used %(percent)s %% of its monthly spend limit") % (
            values
        )
        body = _(
            "%(organization)s has spent %(spent)s this month, %(percent)s %% of its monthly "
            "spend limit of %(limit)s. When the limit is reached, new orders are refused; "
            "running hosts keep running. See %(url)s"
        )
    message = body % values
    transaction.on_commit(lambda: send_mail(subject, message, None, recipients))


def _warn_low_balance(wallet: Wallet) -> None:
    organization = wallet.organization
    balance = format_money(wallet.available_minor, wallet.currency)
    recipients = _billing_contacts(organization)
    record_event(
        action="billing.low_balance",
        target=wallet,
        organization=organization,
        data={"available_minor": wallet.available_minor, "notified": len(recipients)},
    )
    if recipients:
        url = f"{settings.LOAM_BASE_URL}/billing/"
        transaction.on_commit(
            lambda: send_mail(
                _("Loam: %(organization)s's balance is low") % {"organization": organization},
                _(
                    "The balance available to %(organization)s is %(balance)s. When it reaches "
                    "zero, running hosts are stopped (not released) until the wallet is topped "
                    "up. Top up at %(url)s"
                )
                % {"organization": organization, "balance": balance, "url": url},
                None,
                recipients,
            )
        )
