"""Invoices: month-end issue from the usage records, with tax rounded half up; idempotent; the
next starts where the last ended; on demand by an operator; the invoice.issued webhook.

March 2026 in Asia/Shanghai: host A (1 accelerator, 100 GB disk = 5 fen an hour) runs 3870 s
(1075 fen), then stays stopped until its disk has existed 20 h (100 fen) and is released; host
B starts at 23:00 on 31 March (1000 fen until midnight). The wallet was charged 2175: prices
include tax, so the invoice's total is 2175, of which 6 % tax: 2175 / 1.06 = 2051.89 -> 2052 net,
123 tax.
"""

from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from apps.billing import invoicing, selectors
from apps.billing.models import (
    BillingMode,
    Invoice,
    InvoiceLine,
    InvoiceState,
    MeterKind,
    UsageRecord,
)
from apps.billing.tasks import issue_due_invoices as issue_due_invoices_task
from apps.core.errors import PermissionDenied
from apps.orders.models import OrderKind
from apps.webhooks.models import WebhookDelivery
from tests.billing.conftest import local
from tests.factories import (
    MeterFactory,
    OrganizationFactory,
    ParkOperatorFactory,
    UserFactory,
    WalletFactory,
    WebhookEndpointFactory,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english_messages")]

MARCH, APRIL, MAY = local(2026, 3, 1), local(2026, 4, 1), local(2026, 5, 1)


@pytest.fixture(autouse=True)
def _tax(settings):
    settings.LOAM_INVOICE_TAX_RATE = "0.06"


@pytest.fixture
def march(travel, world, running_host, operate, meter):
    """The month described above; the clock left at 00:10 on 1 April, metered up to then."""
    clock = travel(local(2026, 3, 10, 10))
    a = running_host(1, data_disk_gb=100, name="host-a")
    clock.shift(1800)
    meter()
    clock.shift(2070)
    operate(a, OrderKind.STOP)
    clock.shift(72000 - 3870)
    operate(a, OrderKind.RELEASE)
    clock.move_to(local(2026, 3, 31, 23))
    b = running_host(1, name="host-b")
    clock.move_to(local(2026, 3, 31, 23, 30))
    meter()
    clock.move_to(local(2026, 4, 1, 0, 10))
    meter()  # metering runs before the invoices: its April records wait for May
    return clock, a, b


def test_month_end_issues_an_invoice_of_last_months_usage(march, world):
    clock, a, b = march
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    assert invoice.organization == world.organization
    assert (invoice.period_start, invoice.period_end) == (MARCH, APRIL)
    assert invoice.currency == "CNY"
    assert invoice.subtotal_minor == 2052  # net of tax
    assert invoice.tax_rate == Decimal("0.06")
    assert invoice.tax_minor == 123
    assert invoice.total_minor == 2175
    assert invoice.state == InvoiceState.PAID  # prepaid: paid as it was used
    assert invoice.issued_at == timezone.now()
    assert invoice.number == f"INV-202603-{world.organization.pk:06d}-001"
    lines = [
        (line.workload.instance.pk, line.kind, line.quantity, line.seconds, line.amount_minor)
        for line in invoice.lines.all()
    ]
    assert lines == [
        (a.pk, MeterKind.COMPUTE, 1, 3870, 1075),
        (a.pk, MeterKind.DISK, 100, 72000, 100),
        (b.pk, MeterKind.COMPUTE, 1, 3600, 1000),
    ]
    assert [line.description for line in invoice.lines.all()] == ["host-a", "host-a", "host-b"]
    assert [line.compute_unit_milliseconds for line in invoice.lines.all()] == [
        12_074_400,  # 3.12 × 3870 s
        0,
        11_232_000,
    ]
    assert invoice.lines.get(kind=MeterKind.DISK).hours == 20


def test_the_total_is_the_sum_of_the_months_usage_records(march, world):
    invoice = invoicing.issue_due_invoices(now=timezone.now())[0]
    in_march = UsageRecord.objects.filter(started_at__gte=MARCH, started_at__lt=APRIL)
    assert in_march.aggregate(s=Sum("amount_minor"))["s"] == invoice.total_minor
    assert set(in_march.values_list("invoice", flat=True)) == {invoice.pk}
    assert InvoiceLine.objects.aggregate(s=Sum("amount_minor"))["s"] == invoice.total_minor
    # April's first ten minutes of host B are not in it.
    (april,) = UsageRecord.objects.filter(started_at__gte=APRIL)
    assert (april.invoice, april.seconds) == (None, 600)


def test_issuing_again_issues_nothing(march):
    assert len(invoicing.issue_due_invoices(now=timezone.now())) == 1
    assert invoicing.issue_due_invoices(now=timezone.now()) == []
    march[0].shift(3600)
    assert issue_due_invoices_task() == 0
    assert Invoice.objects.count() == 1


def test_the_next_invoice_starts_where_the_last_ended(march, world, operate, meter):
    clock, _a, b = march
    invoicing.issue_due_invoices(now=timezone.now())
    clock.move_to(local(2026, 4, 2))
    operate(b, OrderKind.RELEASE)  # 25 h in all: 24 of them in April
    clock.move_to(local(2026, 5, 1, 0, 5))
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    assert (invoice.period_start, invoice.period_end) == (APRIL, MAY)
    assert (invoice.subtotal_minor, invoice.tax_minor, invoice.total_minor) == (
        22_642,
        1358,
        24_000,
    )
    assert invoice.number == f"INV-202604-{world.organization.pk:06d}-002"
    ((instance, seconds),) = invoice.lines.values_list("workload__instance", "seconds")
    assert (instance, seconds) == (b.pk, 24 * 3600)
    assert not UsageRecord.objects.filter(invoice=None).exists()


def test_a_month_without_usage_has_no_invoice(march, operate):
    clock, _a, b = march
    operate(b, OrderKind.RELEASE)
    invoicing.issue_due_invoices(now=timezone.now())
    clock.move_to(local(2026, 5, 1, 0, 5))
    invoicing.issue_due_invoices(now=timezone.now())  # April: 10 minutes of host B
    clock.move_to(local(2026, 6, 1, 0, 5))
    assert invoicing.issue_due_invoices(now=timezone.now()) == []  # May: nothing ran
    assert Invoice.objects.count() == 2


def test_one_invoice_per_organization_with_usage(travel, park):
    travel(local(2026, 4, 1, 0, 1))
    used = [OrganizationFactory(park=park), OrganizationFactory()]
    for organization in used:
        MeterFactory(organization=organization, started_at=local(2026, 3, 31, 22))
    OrganizationFactory(park=park)  # nothing used
    MeterFactory(organization=OrganizationFactory(), started_at=local(2026, 4, 1))  # only April
    issued = invoicing.issue_due_invoices(now=timezone.now())
    assert sorted(i.organization_id for i in issued) == sorted(o.pk for o in used)
    for invoice in issued:
        assert (invoice.total_minor, invoice.tax_minor) == (5000, 283)  # 2 h at 25.00
        assert (invoice.period_start, invoice.period_end) == (MARCH, APRIL)


def test_the_included_tax_leaves_a_net_rounded_half_up():
    assert invoicing.included_tax(1075, Decimal("0.06")) == 61  # net 1014.15 -> 1014
    assert invoicing.included_tax(2175, Decimal("0.06")) == 123  # net 2051.89 -> 2052
    assert invoicing.included_tax(28, Decimal("0.06")) == 2  # net 26.42 -> 26
    assert invoicing.included_tax(3, Decimal("1")) == 1  # net 1.5 -> 2, half up
    assert invoicing.included_tax(0, Decimal("0.06")) == 0
    assert invoicing.included_tax(1000, Decimal("0")) == 0


def test_the_tax_rate_is_the_setting_at_issue(march, settings):
    settings.LOAM_INVOICE_TAX_RATE = "0.13"
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    assert (invoice.tax_rate, invoice.tax_minor, invoice.total_minor) == (
        Decimal("0.13"),
        250,  # net 2175 / 1.13 = 1924.78 -> 1925
        2175,
    )


def test_an_operator_issues_an_invoice_up_to_now(travel, world, running_host, operator, meter):
    clock = travel(local(2026, 3, 10, 10))
    running_host(1)
    clock.shift(5400)
    invoice = invoicing.issue_on_demand(organization=world.organization, operator=operator)
    assert (invoice.period_start, invoice.period_end) == (MARCH, timezone.now())
    assert (invoice.subtotal_minor, invoice.tax_minor, invoice.total_minor) == (1415, 85, 1500)
    assert UsageRecord.objects.filter(invoice=None).count() == 0  # metered up to now for it
    # The month-end invoice starts where it ended.
    clock.move_to(local(2026, 4, 1, 0, 1))
    (month_end,) = invoicing.issue_due_invoices(now=timezone.now())
    assert month_end.period_start == invoice.period_end
    assert month_end.total_minor == 1000 * 518 - 1500  # 10 March 10:00 to 1 April: 518 h
    assert (
        Invoice.objects.aggregate(s=Sum("total_minor"))["s"]
        == UsageRecord.objects.filter(started_at__lt=APRIL).aggregate(s=Sum("amount_minor"))["s"]
    )


def test_only_operators_of_the_park_issue_on_demand(world, owner):
    stranger = UserFactory()
    ParkOperatorFactory(user=stranger)
    for user in (owner, stranger):
        with pytest.raises(PermissionDenied):
            invoicing.issue_on_demand(organization=world.organization, operator=user)
    assert not Invoice.objects.exists()


def test_nothing_to_invoice_is_refused(world, operator):
    with pytest.raises(invoicing.NothingToInvoice) as refused:
        invoicing.issue_on_demand(organization=world.organization, operator=operator)
    assert refused.value.code == "nothing_to_invoice"


def test_a_postpaid_invoice_in_debt_stays_issued_until_paid(march, world, operator):
    from apps.billing import services

    WalletFactory(
        organization=world.organization,
        mode=BillingMode.POSTPAID,
        balance_minor=-2175,
        credit_limit_minor=100_000,
    )
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    assert invoice.state == InvoiceState.ISSUED
    services.adjust_balance(
        organization=world.organization, operator=operator, amount_minor=2000, reason="partial"
    )
    assert Invoice.objects.get(pk=invoice.pk).state == InvoiceState.ISSUED  # still -175
    services.adjust_balance(
        organization=world.organization, operator=operator, amount_minor=175, reason="the rest"
    )
    assert Invoice.objects.get(pk=invoice.pk).state == InvoiceState.PAID


def test_an_issued_invoice_is_sent_to_subscribed_webhooks(march, world):
    subscribed = WebhookEndpointFactory(
        organization=world.organization, event_types=["invoice.issued"]
    )
    WebhookEndpointFactory(organization=world.organization, event_types=["order.done"])
    WebhookEndpointFactory(event_types=["invoice.issued"])  # another organization's
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    (delivery,) = WebhookDelivery.objects.all()
    assert (delivery.endpoint, delivery.event_type) == (subscribed, "invoice.issued")
    payload = delivery.payload
    assert payload["type"] == "invoice.issued"
    assert payload["data"]["invoice"] == invoice.pk
    assert payload["data"]["number"] == invoice.number
    assert (
        payload["data"]["subtotal_minor"],
        payload["data"]["tax_minor"],
        payload["data"]["total_minor"],
    ) == (2052, 123, 2175)
    assert payload["data"]["currency"] == "CNY"
    assert payload["data"]["state"] == InvoiceState.PAID


def test_the_invoice_reads_one_item_per_flavor_and_per_size_summing_to_its_total(march):
    """Issue 35: hosts A and B, both of the one-card flavor, are one item of their hours and
    rate; A's 100 GB disk another; the items' amounts add up to the total exactly."""
    _clock, a, _b = march
    (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    assert [line.hourly_minor for line in invoice.lines.all()] == [
        Decimal(1000),  # ¥10.00 an hour
        Decimal(5),  # 100 GB at ¥0.36 a GB a month: ¥0.05 an hour
        Decimal(1000),
    ]
    items = selectors.invoice_items(invoice, selectors.invoice_lines(invoice))
    flavor = a.flavor
    assert [(i.label, i.kind, i.seconds, i.hours, i.unit_price, i.amount_minor) for i in items] == [
        (
            f"{flavor.code} · 1 × {flavor.accelerator_model}",
            MeterKind.COMPUTE,
            3870 + 3600,
            Decimal("2.08"),
            "¥10.00",
            1075 + 1000,
        ),
        ("100 GB", MeterKind.DISK, 72000, Decimal("20.00"), "¥0.05", 100),
    ]
    assert sum(item.amount_minor for item in items) == invoice.total_minor
