"""The wallet: idempotent metering runs, holds for the first hour, running out (stop, warn,
resume), postpaid credit, and the operator's terms and adjustments.

World prices: 1000 fen an hour per accelerator; 7 GB of cloud disk 0.35 an hour; 3 Mbps 3 an
hour. A 1-accelerator host with both quotes 1003.35 an hour, so its order holds 1003.
"""

from contextlib import suppress
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from apps.billing import services
from apps.billing.models import (
    BillingMode,
    EntryKind,
    FundsSuspension,
    Hold,
    LedgerEntry,
    Meter,
    MeterKind,
    UsageRecord,
    Wallet,
)
from apps.billing.tasks import meter_usage
from apps.core.errors import DomainError, PermissionDenied
from apps.core.models import AuditEvent
from apps.orchestration.backends.base import BackendError
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orders.models import Instance, InstanceState, Order, OrderKind, OrderState
from apps.orders.services import reject_order, submit_create
from tests.factories import (
    FUNDED_BALANCE_MINOR,
    ApprovalPolicyFactory,
    MeterFactory,
    OrganizationFactory,
    ParkOperatorFactory,
    UserFactory,
    WalletFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

HOST = {"data_disk_gb": 7, "bandwidth_mbps": 3}
HOLD = 1003  # 1000 + 0.35 + 3, rounded


def fund(organization, balance_minor, **fields) -> Wallet:
    return WalletFactory(organization=organization, balance_minor=balance_minor, **fields)


def ledger_is_consistent(wallet, opening=FUNDED_BALANCE_MINOR) -> bool:
    wallet.refresh_from_db()
    entries = LedgerEntry.objects.filter(wallet=wallet)
    total = entries.aggregate(s=Sum("amount_minor"))["s"] or 0
    last = entries.order_by("-created_at", "-pk").first()
    return wallet.balance_minor == opening + total and (
        last is None or last.balance_after_minor == wallet.balance_minor
    )


# --- Idempotent closing ---------------------------------------------------------------------


def test_metering_twice_at_the_same_instant_adds_nothing(clock, world, running_host, meter):
    host = running_host(1, **HOST)
    clock.shift(3600)
    assert meter() == HOLD
    state = list(Meter.objects.values_list("metered_until", "metered_seconds", "metered_minor"))
    assert meter() == 0
    assert meter_usage() == 0
    assert UsageRecord.objects.filter(workload__instance=host).count() == 3
    assert LedgerEntry.objects.filter(kind=EntryKind.CHARGE).count() == 1
    assert (
        list(Meter.objects.values_list("metered_until", "metered_seconds", "metered_minor"))
        == state
    )
    assert ledger_is_consistent(world.organization.wallet)


def test_a_crash_inside_metering_records_nothing_and_the_next_run_records_once(
    clock, world, running_host, meter, monkeypatch
):
    host = running_host(1, **HOST)
    clock.shift(1800)
    real_charge, crashes = services.charge, []

    def crash_once(*args, **kwargs):
        if not crashes:
            crashes.append(True)
            raise RuntimeError("worker killed mid-transaction")
        return real_charge(*args, **kwargs)

    monkeypatch.setattr(services, "charge", crash_once)
    assert meter() == 0  # logged; the other organizations would still be metered
    assert crashes
    assert not UsageRecord.objects.exists()
    assert not LedgerEntry.objects.exists()
    assert set(Meter.objects.values_list("metered_until", "metered_seconds")) == {
        (host.created_at, 0)
    }
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.held_minor) == (FUNDED_BALANCE_MINOR, HOLD)

    clock.shift(1800)
    assert meter() == HOLD  # the whole hour, once
    assert meter() == 0
    assert UsageRecord.objects.filter(workload__instance=host).count() == 3
    assert UsageRecord.objects.aggregate(s=Sum("seconds"))["s"] == 3 * 3600
    assert LedgerEntry.objects.get().amount_minor == -HOLD
    assert ledger_is_consistent(world.organization.wallet)


def test_metering_an_earlier_moment_again_records_nothing(clock, world, running_host):
    from apps.billing.metering import meter_organization

    running_host(1)
    clock.shift(3600)
    now = timezone.now()
    assert meter_organization(world.organization.pk, until=now) == 1000
    assert meter_organization(world.organization.pk, until=now - timedelta(minutes=30)) == 0
    assert meter_organization(world.organization.pk, until=now) == 0
    assert UsageRecord.objects.count() == 1


def test_one_organization_failing_does_not_stop_the_others(clock, db, monkeypatch):
    first, second = OrganizationFactory(), OrganizationFactory()
    for organization in (first, second):
        MeterFactory(organization=organization, started_at=timezone.now())
    clock.shift(3600)
    real_charge = services.charge

    def fail_first(wallet, **kwargs):
        if wallet.organization_id == first.pk:
            raise RuntimeError("a bad row in the first organization")
        return real_charge(wallet, **kwargs)

    monkeypatch.setattr(services, "charge", fail_first)
    with suppress(RuntimeError):
        meter_usage()
    assert UsageRecord.objects.filter(organization=second).count() == 1


# --- Holds ----------------------------------------------------------------------------------


def test_an_order_holds_the_first_hour_of_each_host(world, order_hosts):
    orders = order_hosts(1, count=2, name="gpu", **HOST)
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.held_minor) == (FUNDED_BALANCE_MINOR, 2 * HOLD)
    assert wallet.available_minor == FUNDED_BALANCE_MINOR - 2 * HOLD
    assert sorted(Hold.objects.values_list("workload__instance", "amount_minor")) == sorted(
        (order.instance_id, HOLD) for order in orders
    )
    assert {order.hourly_minor for order in orders} == {HOLD}


@pytest.mark.parametrize(("balance", "allowed"), [(HOLD - 1, False), (HOLD, True)])
def test_an_order_needs_its_first_hour_available(world, owner, balance, allowed):
    fund(world.organization, balance)
    request = world.request(1, **HOST)
    if allowed:
        submit_create(organization=world.organization, actor=owner, request=request)
        assert Wallet.objects.get(organization=world.organization).held_minor == HOLD
        return
    with pytest.raises(services.InsufficientFunds) as refused:
        submit_create(organization=world.organization, actor=owner, request=request)
    assert (refused.value.code, refused.value.status) == ("insufficient_funds", 402)
    assert "¥10.03" in refused.value.message and "¥10.02" in refused.value.message
    assert not Instance.objects.exists() and not Order.objects.exists()
    assert not Hold.objects.exists()
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.held_minor) == (HOLD - 1, 0)


def test_held_money_cannot_be_spent_twice(world, owner, order_hosts):
    fund(world.organization, 1500)
    order_hosts(1, **HOST)
    with pytest.raises(services.InsufficientFunds):
        submit_create(organization=world.organization, actor=owner, request=world.request(1))
    assert Instance.objects.count() == 1


def test_a_count_is_refused_as_a_whole(world, owner):
    fund(world.organization, 2 * HOLD - 1)
    with pytest.raises(services.InsufficientFunds):
        submit_create(
            organization=world.organization,
            actor=owner,
            request=world.request(1, count=2, name="gpu", **HOST),
        )
    assert not Instance.objects.exists()


def test_charges_draw_the_hold_down(clock, world, running_host, meter):
    host = running_host(1, **HOST)
    clock.shift(1800)
    assert meter() == 502  # compute 500, bandwidth 1.5 -> 2, disk 0.175 -> 0
    assert Hold.objects.get(workload__instance=host).amount_minor == HOLD - 502
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.held_minor) == (FUNDED_BALANCE_MINOR - 502, HOLD - 502)
    clock.shift(3600)
    assert meter() == 1004  # 1506 so far (compute 1500, bandwidth 4.5 -> 5, disk 0.525 -> 1)
    assert Hold.objects.get(workload__instance=host).amount_minor == 0
    wallet.refresh_from_db()
    assert (wallet.balance_minor, wallet.held_minor) == (FUNDED_BALANCE_MINOR - 1506, 0)


def test_releasing_a_host_gives_back_what_is_still_held(clock, world, running_host, operate, meter):
    host = running_host(1, **HOST)
    clock.shift(1800)
    meter()
    operate(host, OrderKind.RELEASE)
    assert Hold.objects.get(workload__instance=host).amount_minor == 0
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.held_minor) == (FUNDED_BALANCE_MINOR - 502, 0)


def test_a_rejected_order_gives_its_hold_back(world, order_hosts, operator):
    ApprovalPolicyFactory(park=world.park, max_accelerators=0)
    (order,) = order_hosts(1, **HOST)
    assert order.state == OrderState.AWAITING_APPROVAL
    assert Wallet.objects.get(organization=world.organization).held_minor == HOLD
    reject_order(order=order, operator=operator, reason="Not this month.")
    assert Wallet.objects.get(organization=world.organization).held_minor == 0
    assert Hold.objects.get(workload__instance=order.instance_id).amount_minor == 0


def test_a_failed_provisioning_gives_its_hold_back(world, order_hosts):
    SimulatorDriver.fail_next(BackendError("simulator: no such image"))
    (order,) = order_hosts(1, **HOST)
    assert Instance.objects.get(pk=order.instance_id).state == InstanceState.ERROR
    assert Wallet.objects.get(organization=world.organization).held_minor == 0
    assert not Meter.objects.exists()  # it never ran: nothing to pay


def test_a_cancelled_order_gives_its_hold_back(world, order_hosts, owner):
    from apps.orders.services import cancel_order

    ApprovalPolicyFactory(park=world.park, max_accelerators=0)
    (order,) = order_hosts(1, **HOST)
    cancel_order(order=order, actor=owner)
    assert Wallet.objects.get(organization=world.organization).held_minor == 0


# --- Running out: stop at zero, warn once, resume after a top-up ----------------------------


@pytest.fixture
def nearly_broke(clock, world, running_host, meter):
    """A running host on a wallet of ¥15.00 (¥10.03 of it held for the first hour)."""
    fund(world.organization, 1500)
    return running_host(1, **HOST)


def test_running_out_stops_the_hosts_and_keeps_their_disks(
    clock, world, nearly_broke, meter, mailoutbox
):
    host = nearly_broke
    clock.shift(3600)
    meter()  # 1003 charged, all from the hold: 497 left
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING
    clock.shift(1800)
    meter()  # 503 more: -6
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.balance_minor, wallet.available_minor) == (-6, -6)
    host.refresh_from_db()
    assert host.state == InstanceState.STOPPED  # stopped, not released
    assert host.released_at is None
    suspension = FundsSuspension.objects.get(workload__instance=host)
    assert suspension.resumed_at is None
    stop = host.orders.get(kind=OrderKind.STOP)
    assert stop.state == OrderState.DONE and stop.created_by is None
    open_meters = Meter.objects.filter(workload__instance=host, ended_at__isnull=True)
    assert list(open_meters.values_list("kind", flat=True)) == [MeterKind.DISK]  # disk kept
    # Owed usage is charged past zero, and the stopped host's disk still costs.
    clock.shift(10800)
    meter()
    wallet.refresh_from_db()
    assert wallet.balance_minor == -6 - 1  # the disk's 4.5 h at 0.35: 1.575 -> 2, 1 more
    assert FundsSuspension.objects.filter(workload__instance=host).count() == 1
    assert host.orders.filter(kind=OrderKind.STOP).count() == 1
    assert ledger_is_consistent(wallet, opening=1500)


def test_the_owner_and_billing_members_are_warned_once(
    clock, world, nearly_broke, meter, mailoutbox, owner, billing, member
):
    clock.shift(60)
    meter()  # 497 - 17 available: less than 24 hours at 1003.35
    assert len(mailoutbox) == 1
    (mail,) = mailoutbox
    assert sorted(mail.to) == sorted([owner.email, billing.email])
    assert world.organization.name in mail.subject
    assert "/billing/" in mail.body
    warned = Wallet.objects.get(organization=world.organization).low_balance_warned_at
    assert warned is not None
    for _run in range(3):
        clock.shift(1800)
        meter()
    assert Instance.objects.get(pk=nearly_broke.pk).state == InstanceState.STOPPED
    assert len(mailoutbox) == 1  # once, not at every run nor again at zero
    assert AuditEvent.objects.filter(action="billing.low_balance").count() == 1


def test_the_banner_shows_while_the_balance_is_low(
    clock, world, nearly_broke, meter, owner, english_client
):
    english_client.force_login(owner)
    page = english_client.get(reverse("billing:overview"))
    assert 'id="low-balance"' not in page.content.decode()
    clock.shift(60)
    meter()
    page = english_client.get(reverse("billing:overview"))
    assert 'id="low-balance"' in page.content.decode()
    assert "The balance is running low" in page.content.decode()
    clock.shift(5400)
    meter()
    page = english_client.get(reverse("orders:instance_list"))
    assert "running hosts are stopped (not released)" in page.content.decode()


def test_a_top_up_by_the_operator_resumes_the_stopped_hosts(
    clock, world, nearly_broke, meter, operator, django_capture_on_commit_callbacks
):
    host = nearly_broke
    clock.shift(5400)
    meter()
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPED
    clock.shift(60)
    with django_capture_on_commit_callbacks(execute=True):
        services.adjust_balance(
            organization=world.organization,
            operator=operator,
            amount_minor=100_000,
            reason="Bank transfer received",
        )
    host.refresh_from_db()
    assert host.state == InstanceState.RUNNING
    suspension = FundsSuspension.objects.get(workload__instance=host)
    assert suspension.resumed_at is not None
    start = host.orders.get(kind=OrderKind.START)
    assert start.state == OrderState.DONE
    assert Meter.objects.filter(
        workload__instance=host, kind=MeterKind.COMPUTE, ended_at=None
    ).exists()
    # Metering again does not stop it, and the warning is cleared once the money is back.
    clock.shift(60)
    meter()
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING
    assert Wallet.objects.get(organization=world.organization).low_balance_warned_at is None


def test_a_host_still_stopping_at_the_top_up_is_resumed_by_the_next_run(
    clock, world, nearly_broke, meter, operator, django_capture_on_commit_callbacks
):
    from apps.orders.tasks import fulfil_order

    host = nearly_broke
    clock.shift(5400)
    meter_usage()  # the stop is requested; its backend call (after commit) has not run yet
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPING
    with django_capture_on_commit_callbacks(execute=True):
        services.adjust_balance(
            organization=world.organization, operator=operator, amount_minor=100_000, reason="x"
        )
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPING
    assert FundsSuspension.objects.get(workload__instance=host).resumed_at is None
    with django_capture_on_commit_callbacks(execute=True):
        fulfil_order.delay(host.orders.get(kind=OrderKind.STOP).pk)
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPED
    clock.shift(60)
    meter()
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING
    assert FundsSuspension.objects.get(workload__instance=host).resumed_at == timezone.now()


def test_a_host_the_tenant_released_meanwhile_is_not_resumed(
    clock, world, nearly_broke, meter, operate, operator, django_capture_on_commit_callbacks
):
    host = nearly_broke
    clock.shift(5400)
    meter()
    operate(host, OrderKind.RELEASE)
    with django_capture_on_commit_callbacks(execute=True):
        services.adjust_balance(
            organization=world.organization, operator=operator, amount_minor=1000, reason="x"
        )
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RELEASED
    assert FundsSuspension.objects.get(workload__instance=host).resumed_at is not None


def test_a_top_up_too_small_to_cover_the_debt_resumes_nothing(
    clock, world, nearly_broke, meter, operator, django_capture_on_commit_callbacks
):
    clock.shift(5400)
    meter()
    with django_capture_on_commit_callbacks(execute=True):
        services.adjust_balance(
            organization=world.organization, operator=operator, amount_minor=6, reason="x"
        )
    assert Instance.objects.get(pk=nearly_broke.pk).state == InstanceState.STOPPED
    assert FundsSuspension.objects.get(workload__instance=nearly_broke).resumed_at is None


def test_a_stopped_host_cannot_be_started_without_money(clock, world, nearly_broke, meter, owner):
    clock.shift(5400)
    meter()
    from apps.orders.operations import request_operation

    with pytest.raises(services.InsufficientFunds):
        request_operation(instance=nearly_broke, actor=owner, kind=OrderKind.START)


# --- Postpaid credit ------------------------------------------------------------------------


def test_operators_set_postpaid_terms(world, operator):
    wallet = services.set_billing_terms(
        organization=world.organization,
        operator=operator,
        mode=BillingMode.POSTPAID,
        credit_limit_minor=5000,
    )
    wallet = Wallet.objects.get(pk=wallet.pk)
    assert (wallet.mode, wallet.credit_limit_minor) == (BillingMode.POSTPAID, 5000)
    assert wallet.available_minor == FUNDED_BALANCE_MINOR + 5000
    event = AuditEvent.objects.get(action="billing.terms_changed")
    assert event.data["after"] == {"mode": "postpaid", "credit_limit_minor": 5000}
    assert event.data["before"] == {"mode": "prepaid", "credit_limit_minor": 0}


def test_only_operators_of_the_park_set_terms(world, owner):
    other_park_operator = UserFactory()
    ParkOperatorFactory(user=other_park_operator)
    for user in (owner, other_park_operator):
        with pytest.raises(PermissionDenied):
            services.set_billing_terms(
                organization=world.organization,
                operator=user,
                mode=BillingMode.POSTPAID,
                credit_limit_minor=5000,
            )
    assert Wallet.objects.get(organization=world.organization).mode == BillingMode.PREPAID


def test_an_unverified_organization_cannot_be_postpaid(organization, operator):
    with pytest.raises(DomainError) as refused:
        services.set_billing_terms(
            organization=organization,
            operator=operator,
            mode=BillingMode.POSTPAID,
            credit_limit_minor=5000,
        )
    assert (refused.value.code, refused.value.status) == ("not_verified", 422)
    assert Wallet.objects.get(organization=organization).mode == BillingMode.PREPAID


@pytest.mark.parametrize(
    ("mode", "limit", "field"),
    [
        (BillingMode.PREPAID, 5000, "credit_limit_minor"),
        (BillingMode.POSTPAID, -1, "credit_limit_minor"),
        ("barter", 0, "mode"),
    ],
)
def test_terms_that_do_not_fit_are_refused(world, operator, mode, limit, field):
    with pytest.raises(ValidationError) as refused:
        services.set_billing_terms(
            organization=world.organization, operator=operator, mode=mode, credit_limit_minor=limit
        )
    assert field in refused.value.message_dict
    wallet = Wallet.objects.get(organization=world.organization)
    assert (wallet.mode, wallet.credit_limit_minor) == (BillingMode.PREPAID, 0)


@pytest.fixture
def postpaid(world, operator):
    """A verified organization on postpaid terms, ¥50.00 of credit, nothing paid in."""
    fund(world.organization, 0)
    return services.set_billing_terms(
        organization=world.organization,
        operator=operator,
        mode=BillingMode.POSTPAID,
        credit_limit_minor=5000,
    )


def test_a_prepaid_wallet_with_nothing_in_it_orders_nothing(world, owner):
    fund(world.organization, 0)
    with pytest.raises(services.InsufficientFunds):
        submit_create(organization=world.organization, actor=owner, request=world.request(1))


def test_a_postpaid_wallet_orders_into_its_credit_and_stops_at_the_limit(
    clock, postpaid, world, running_host, meter
):
    host = running_host(1)  # 1000 an hour
    wallet = Wallet.objects.get(pk=postpaid.pk)
    assert (wallet.balance_minor, wallet.held_minor, wallet.available_minor) == (0, 1000, 4000)
    for _hour in range(4):
        clock.shift(3600)
        meter()
    wallet.refresh_from_db()
    assert (wallet.balance_minor, wallet.available_minor) == (-4000, 1000)
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING
    clock.shift(3600)
    meter()
    wallet.refresh_from_db()
    assert (wallet.balance_minor, wallet.available_minor) == (-5000, 0)
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPED
    assert FundsSuspension.objects.filter(workload__instance=host, resumed_at=None).exists()


def test_a_postpaid_order_beyond_the_credit_is_refused(postpaid, world, owner, order_hosts):
    order_hosts(4)  # 4000 held of 5000
    with pytest.raises(services.InsufficientFunds):
        submit_create(organization=world.organization, actor=owner, request=world.request(2))


def test_raising_the_credit_limit_resumes_the_stopped_hosts(
    clock, postpaid, world, running_host, meter, operator, django_capture_on_commit_callbacks
):
    host = running_host(1)
    clock.shift(5 * 3600)
    meter()
    assert Instance.objects.get(pk=host.pk).state == InstanceState.STOPPED
    with django_capture_on_commit_callbacks(execute=True):
        services.set_billing_terms(
            organization=world.organization,
            operator=operator,
            mode=BillingMode.POSTPAID,
            credit_limit_minor=20_000,
        )
    assert Instance.objects.get(pk=host.pk).state == InstanceState.RUNNING


# --- Operator adjustments -------------------------------------------------------------------


def test_an_adjustment_is_a_ledger_entry_with_its_reason(world, operator):
    entry = services.adjust_balance(
        organization=world.organization,
        operator=operator,
        amount_minor=-2500,
        reason="  Goodwill reversed  ",
    )
    assert (entry.kind, entry.amount_minor, entry.description) == (
        EntryKind.ADJUSTMENT,
        -2500,
        "Goodwill reversed",
    )
    assert entry.balance_after_minor == FUNDED_BALANCE_MINOR - 2500
    assert ledger_is_consistent(world.organization.wallet)
    assert AuditEvent.objects.filter(action="billing.balance_adjusted").count() == 1


@pytest.mark.parametrize(
    ("amount", "reason", "field"), [(0, "x", "amount_minor"), (5, " ", "reason")]
)
def test_an_adjustment_needs_an_amount_and_a_reason(world, operator, amount, reason, field):
    with pytest.raises(ValidationError) as refused:
        services.adjust_balance(
            organization=world.organization, operator=operator, amount_minor=amount, reason=reason
        )
    assert field in refused.value.message_dict
    assert not LedgerEntry.objects.exists()


def test_only_operators_of_the_park_adjust(world, owner):
    with pytest.raises(PermissionDenied):
        services.adjust_balance(
            organization=world.organization, operator=owner, amount_minor=100, reason="x"
        )
    assert not LedgerEntry.objects.exists()


def test_a_new_organization_is_asked_to_top_up_not_told_hosts_were_stopped(
    organization, owner, english_client
):
    services.wallet_of(organization)
    Wallet.objects.filter(organization=organization).update(balance_minor=0)  # nothing ever ran
    english_client.force_login(owner)

    html = english_client.get(reverse("billing:overview")).content.decode()

    assert 'id="low-balance"' in html
    assert "top up the wallet to order hosts and run tasks" in html
    assert "running hosts are stopped" not in html
