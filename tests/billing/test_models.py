"""The billing tables refuse bad rows themselves: no form or full_clean() runs here."""

from datetime import UTC, date, datetime, timedelta
from importlib import import_module
from types import SimpleNamespace

import pytest
from django.apps import apps as django_apps
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from apps.billing.models import (
    BillingMode,
    EntryKind,
    Invoice,
    LedgerEntry,
    MonthlySpend,
    Payment,
    UsageRecord,
    Wallet,
)
from apps.workloads.models import WorkloadKind
from tests.factories import (
    EPOCH,
    InvoiceFactory,
    LedgerEntryFactory,
    MeterFactory,
    PaymentFactory,
    UsageRecordFactory,
    WalletFactory,
    refused,
)

pytestmark = pytest.mark.django_db


class TestWallet:
    def test_valid_row_saves(self):
        wallet = WalletFactory(balance_minor=500, held_minor=200)
        assert Wallet.objects.get(pk=wallet.pk).available_minor == 300

    def test_second_wallet_for_organization_refused(self):
        wallet = WalletFactory()
        with refused("billing_wallet.organization_id"):
            Wallet.objects.create(organization=wallet.organization, currency=wallet.currency)

    def test_unknown_currency_refused(self):
        with refused("wallet_currency_known"):
            WalletFactory(currency="BTC")

    def test_unknown_mode_refused(self):
        with refused("wallet_mode_known"):
            WalletFactory(mode="barter")

    def test_negative_hold_refused(self):
        with refused("wallet_held_not_negative"):
            WalletFactory(held_minor=-1)

    def test_negative_credit_limit_refused(self):
        with refused("wallet_credit_not_negative"):
            WalletFactory(credit_limit_minor=-1)

    def test_credit_limit_on_prepaid_wallet_refused(self):
        with refused("wallet_credit_only_postpaid"):
            WalletFactory(mode=BillingMode.PREPAID, credit_limit_minor=500)

    def test_postpaid_wallet_with_credit_accepted(self):
        wallet = WalletFactory(
            mode=BillingMode.POSTPAID, balance_minor=-400, held_minor=100, credit_limit_minor=500
        )
        assert Wallet.objects.get(pk=wallet.pk).available_minor == 0

    def test_usage_owed_past_the_balance_is_kept(self):
        # Metering charges what already ran even past zero; the services stop the hosts there.
        wallet = WalletFactory(balance_minor=100, held_minor=0)
        Wallet.objects.filter(pk=wallet.pk).update(balance_minor=F("balance_minor") - 150)
        wallet.refresh_from_db()
        assert (wallet.balance_minor, wallet.available_minor) == (-50, -50)


class TestLedgerEntry:
    @pytest.mark.parametrize(
        ("kind", "amount"),
        [
            (EntryKind.TOP_UP, 100),
            (EntryKind.REFUND, 100),
            (EntryKind.CHARGE, -100),
            (EntryKind.ADJUSTMENT, 100),
            (EntryKind.ADJUSTMENT, -100),
        ],
    )
    def test_signed_amounts_accepted(self, kind, amount):
        entry = LedgerEntryFactory(kind=kind, amount_minor=amount)
        assert LedgerEntry.objects.get(pk=entry.pk).amount_minor == amount

    def test_unknown_kind_refused(self):
        with refused("ledger_kind_known"):
            LedgerEntryFactory(kind="gift")

    @pytest.mark.parametrize("kind", EntryKind.values)
    def test_zero_amount_refused(self, kind):
        with refused("ledger_amount_not_zero"):
            LedgerEntryFactory(kind=kind, amount_minor=0)

    def test_charge_with_positive_amount_refused(self):
        with refused("ledger_sign_matches_kind"):
            LedgerEntryFactory(kind=EntryKind.CHARGE, amount_minor=100)

    @pytest.mark.parametrize("kind", [EntryKind.TOP_UP, EntryKind.REFUND])
    def test_credit_with_negative_amount_refused(self, kind):
        with refused("ledger_sign_matches_kind"):
            LedgerEntryFactory(kind=kind, amount_minor=-100)

    def test_charge_flipped_positive_by_update_refused(self):
        entry = LedgerEntryFactory(charge=True)
        with refused("ledger_sign_matches_kind"):
            LedgerEntry.objects.filter(pk=entry.pk).update(amount_minor=-F("amount_minor"))
        entry.refresh_from_db()
        assert entry.amount_minor == -2500


class TestPayment:
    def test_valid_row_saves(self):
        payment = PaymentFactory()
        saved = Payment.objects.get(pk=payment.pk)
        assert saved.currency == saved.wallet.currency

    @pytest.mark.parametrize("amount", [0, -100])
    def test_amount_not_positive_refused(self, amount):
        with refused("payment_amount_positive"):
            PaymentFactory(amount_minor=amount)

    def test_unknown_state_refused(self):
        with refused("payment_state_known"):
            PaymentFactory(state="refunded")

    def test_unknown_currency_refused(self):
        with refused("payment_currency_known"):
            PaymentFactory(currency="EUR")

    def test_duplicate_checkout_session_refused(self):
        payment = PaymentFactory()
        with refused("payment_checkout_session_unique"):
            PaymentFactory(stripe_checkout_session_id=payment.stripe_checkout_session_id)

    def test_payments_without_checkout_session_accepted_twice(self):
        wallet = WalletFactory()
        PaymentFactory(wallet=wallet, stripe_checkout_session_id="")
        PaymentFactory(wallet=wallet, stripe_checkout_session_id="")
        assert Payment.objects.filter(wallet=wallet, stripe_checkout_session_id="").count() == 2


class TestInvoice:
    def test_valid_row_saves(self):
        invoice = InvoiceFactory(subtotal_minor=10_000, tax_minor=600)
        assert Invoice.objects.get(pk=invoice.pk).total_minor == 10_600

    def test_total_not_the_sum_refused(self):
        with refused("invoice_total_is_sum"):
            InvoiceFactory(subtotal_minor=10_000, tax_minor=600, total_minor=10_000)

    def test_tax_changed_without_total_by_update_refused(self):
        invoice = InvoiceFactory()
        with refused("invoice_total_is_sum"):
            Invoice.objects.filter(pk=invoice.pk).update(tax_minor=F("tax_minor") + 1)
        invoice.refresh_from_db()
        assert invoice.total_minor == invoice.subtotal_minor + invoice.tax_minor

    def test_period_ending_before_start_refused(self):
        with refused("invoice_period_positive"):
            InvoiceFactory(period_start=EPOCH, period_end=EPOCH - timedelta(days=1))

    def test_empty_period_refused(self):
        with refused("invoice_period_positive"):
            InvoiceFactory(period_start=EPOCH, period_end=EPOCH)

    @pytest.mark.parametrize(
        "amounts",
        [
            {"subtotal_minor": -100, "tax_minor": 0, "total_minor": -100},
            {"subtotal_minor": 100, "tax_minor": -6, "total_minor": 94},
        ],
    )
    def test_negative_amounts_refused(self, amounts):
        with refused("invoice_amounts_not_negative"):
            InvoiceFactory(**amounts)

    def test_unknown_state_refused(self):
        with refused("invoice_state_known"):
            InvoiceFactory(state="overdue")

    def test_unknown_currency_refused(self):
        with refused("invoice_currency_known"):
            InvoiceFactory(currency="EUR")

    def test_second_invoice_for_same_period_refused(self):
        invoice = InvoiceFactory()
        with refused("invoice_one_per_period"):
            InvoiceFactory(organization=invoice.organization, period_start=invoice.period_start)

    def test_duplicate_number_refused(self):
        invoice = InvoiceFactory()
        with refused("billing_invoice.number"):
            InvoiceFactory(number=invoice.number)


class TestUsageRecord:
    def test_instance_record_saves(self):
        record = UsageRecordFactory()
        saved = UsageRecord.objects.get(pk=record.pk)
        assert saved.workload.kind == WorkloadKind.HOST
        assert saved.workload.instance.organization == saved.organization
        assert saved.ended_at - saved.started_at == timedelta(seconds=saved.seconds)

    def test_task_record_saves(self):
        record = UsageRecordFactory(for_task=True)
        saved = UsageRecord.objects.get(pk=record.pk)
        assert saved.workload.kind == WorkloadKind.TASK
        assert saved.workload.task.organization == saved.organization

    def test_record_of_no_workload_refused(self):
        meter = MeterFactory()
        with pytest.raises(IntegrityError, match="workload_id"), transaction.atomic():
            UsageRecordFactory(organization=meter.organization, meter=meter, instance=None)

    @pytest.mark.parametrize("offset", [timedelta(0), timedelta(seconds=-1)])
    def test_interval_not_positive_refused(self, offset):
        with refused("usage_interval_positive"):
            UsageRecordFactory(started_at=EPOCH, ended_at=EPOCH + offset)

    @pytest.mark.parametrize("field", ["amount_minor", "hourly_minor", "compute_unit_milliseconds"])
    def test_negative_amounts_refused(self, field):
        with refused("usage_amounts_not_negative"):
            UsageRecordFactory(**{field: -1})

    def test_unknown_currency_refused(self):
        with refused("usage_currency_known"):
            UsageRecordFactory(currency="EUR")

    def test_same_meter_interval_twice_refused(self):
        record = UsageRecordFactory()
        with refused("usage_meter_interval_unique"):
            UsageRecordFactory(
                organization=record.organization,
                instance=record.workload.instance,
                meter=record.meter,
                started_at=record.started_at,
            )
        assert UsageRecord.objects.filter(workload=record.workload).count() == 1

    def test_same_task_interval_twice_refused(self):
        record = UsageRecordFactory(for_task=True)
        with refused("usage_meter_interval_unique"):
            UsageRecordFactory(
                organization=record.organization,
                instance=None,
                task=record.workload.task,
                meter=record.meter,
                started_at=record.started_at,
            )

    def test_next_interval_of_same_instance_accepted(self):
        record = UsageRecordFactory()
        UsageRecordFactory(
            organization=record.organization,
            instance=record.workload.instance,
            meter=record.meter,
            started_at=record.ended_at,
        )
        assert UsageRecord.objects.filter(workload=record.workload).count() == 2

    def test_two_instances_metered_for_same_interval_accepted(self):
        record = UsageRecordFactory()
        UsageRecordFactory(organization=record.organization, started_at=record.started_at)
        assert UsageRecord.objects.filter(started_at=record.started_at).count() == 2


def test_monthly_spend_is_once_per_organization_and_month_and_never_negative():
    record = UsageRecordFactory(amount_minor=70)
    month = MonthlySpend.objects.get(organization=record.organization)
    assert month.amount_minor == 70
    with refused("monthly_spend_once"):
        MonthlySpend.objects.create(
            organization=record.organization, month=month.month, amount_minor=1
        )
    with refused("monthly_spend_not_negative"):
        MonthlySpend.objects.filter(pk=month.pk).update(amount_minor=-1)


def test_the_migration_adds_up_the_usage_recorded_before_it():
    """Months of the park's time zone: a record at 23:30 on 31 March UTC is April's in Shanghai."""
    first = UsageRecordFactory(amount_minor=5, started_at=EPOCH)
    UsageRecordFactory(organization=first.organization, amount_minor=7, started_at=EPOCH)
    late = datetime(2026, 3, 31, 23, 30, tzinfo=UTC)
    other = UsageRecordFactory(amount_minor=11, started_at=late)
    MonthlySpend.objects.all().delete()

    migration = import_module("apps.billing.migrations.0012_monthly_spend")
    migration.add_up_usage(django_apps, SimpleNamespace(connection=connection))

    assert set(MonthlySpend.objects.values_list("organization", "month", "amount_minor")) == {
        (first.organization_id, timezone.localtime(EPOCH).date().replace(day=1), 12),
        (other.organization_id, date(2026, 4, 1), 11),
    }
