"""`seed_demo`'s month of life: after it, both consoles show a working park (what runs, what ran,
what it cost, what waits for the operators), written through the services at past moments, and
the books balance. Run again, it adds nothing; run a day later, it brings the park up to date.

The park's clock is frozen at NOW (10:00 in the park's time zone) for each test."""

import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.apps import apps
from django.core.management import call_command
from django.db.models import Max, Sum
from django.utils import timezone, translation

from apps.billing.metering import amount_for
from apps.billing.models import (
    BankTransfer,
    BankTransferState,
    EntryKind,
    Invoice,
    LedgerEntry,
    MeterKind,
    UsageRecord,
    Wallet,
)
from apps.core.models import AuditEvent
from apps.operations import demo
from apps.operations.demo_life import story_start
from apps.orchestration.models import CapacitySample, Pool, Task, TaskState
from apps.orders.models import HostSample, Instance, InstanceState, Order, OrderState
from apps.tenants.models import Organization, Park, VerificationState

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
ALIVE = ("tenants", "catalog", "quotas", "orchestration", "orders", "billing", "core")


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def seed(clock, settings, tmp_path):
    """seed() runs `seed_demo` (at the clock's moment) and returns what it printed."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.MEDIA_ROOT = tmp_path  # the licences the tenants send

    def run(*args) -> str:
        out = StringIO()
        call_command("seed_demo", *args, stdout=out)
        return out.getvalue()

    return run


@pytest.fixture
def park(seed):
    seed()
    return Park.objects.get(slug=demo.PARK["slug"])


@pytest.fixture
def enterprise(park):
    return Organization.objects.get(park=park, slug=demo.ENTERPRISE["slug"])


@pytest.fixture
def tenant(client, enterprise):
    client.force_login(enterprise.memberships.get(role="owner").user)
    return client


@pytest.fixture
def operator(client, park):
    client.force_login(park.operators.get().user)
    return client


def at(moment: tuple) -> datetime:
    """A moment of the story (demo.day / demo.ago), for a seed run at NOW."""
    anchor, delta = moment
    return (story_start(NOW) if anchor == "start" else NOW) + delta


def rows(html: str, attribute: str) -> dict[str, str]:
    """The table rows carrying `attribute` ("data-instance", …): its value -> the row's text."""
    found = re.findall(rf'<tr {attribute}="([^"]+)"[^>]*>(.*?)</tr>', html, re.S)
    return {key: " ".join(re.sub(r"<[^>]+>", " ", row).split()) for key, row in found}


def row_counts() -> dict[str, int]:
    return {
        model._meta.label: model.objects.count()
        for app in ALIVE
        for model in apps.get_app_config(app).get_models()
    }


# --- the tenant's console -------------------------------------------------------------------


def test_the_tenant_home_shows_what_runs_what_it_costs_and_what_waits(tenant):
    response = tenant.get("/")

    home = response.context["home"]
    assert (home.running_host_count, home.host_count, home.task_count) == (4, 5, 1)
    assert home.spend.today_minor > 0 and home.spend.hourly_minor > 0
    assert home.wallet.available_minor > 0
    hosts = rows(response.content.decode(), "data-instance")
    assert sorted(text.split()[0] for text in hosts.values()) == [
        "infer-edge-01",
        "infer-l40s-01",
        "llm-sft-a100",
        "mlu-bench",
        "notebook-910b",
    ]
    assert [text for text in hosts.values() if "Stopped" in text] == [
        "notebook-910b ascend910b.1x 江苏省节点 · 南京 Stopped"
    ]
    [task] = rows(response.content.decode(), "data-task").values()
    assert task.startswith("qwen2-7b-dpo") and task.endswith("Running")


def test_the_host_list_has_running_and_stopped_hosts_and_leaves_the_released_out(tenant):
    hosts = rows(tenant.get("/instances/").content.decode(), "data-instance")

    states = {text.split()[0]: text for text in hosts.values()}
    assert set(states) == {
        "llm-sft-a100",
        "infer-l40s-01",
        "notebook-910b",
        "infer-edge-01",
        "mlu-bench",
    }
    assert "Stopped" in states["notebook-910b"] and "Start it to log in" in states["notebook-910b"]
    for name in ("llm-sft-a100", "infer-l40s-01", "infer-edge-01", "mlu-bench"):
        assert "Running" in states[name] and "ssh -p 22 root@198.18." in states[name]
    # Released weeks ago: no longer listed (a week is), still on the invoice.
    assert set(
        Instance.objects.filter(state=InstanceState.RELEASED).values_list("name", flat=True)
    ) == {"pretrain-h200", "dcu-eval"}


def test_a_running_hosts_charts_show_its_past_week(tenant, enterprise):
    """The simulator's model sampled every 5 minutes back over the charts' week: the 7 d chart
    is drawn on first sign-in, and the host's busy cards read busy."""
    host = Instance.objects.get(organization=enterprise, name="llm-sft-a100")

    week = tenant.get(f"/instances/{host.pk}/monitoring/", {"range": "7d"}).json()

    assert week["has_data"] and week["simulated"]
    utilization = [value for value in week["series"]["gpu_utilization_pct"] if value is not None]
    assert len(utilization) >= 350  # of the 360 points of a week (it ran all week)
    assert max(utilization) > 30
    assert HostSample.objects.filter(instance=host).count() >= 7 * 24 * 12


def test_the_task_list_has_finished_failed_and_running_tasks(tenant):
    tasks = rows(tenant.get("/tasks/").content.decode(), "data-task")

    states = {text.split()[0]: text.split()[1] for text in tasks.values()}
    assert states == {
        "qwen2-7b-sft": "Succeeded",
        "bert-zh-ner": "Failed",
        "resnet50-mindspore": "Succeeded",
        "llama-eval-dcu": "Succeeded",
        "qwen2-7b-sft-v2": "Succeeded",
        "vit-distill": "Failed",
        "qwen2-7b-dpo": "Running",
    }
    failed = Task.objects.get(name="vit-distill")
    page = tenant.get(f"/tasks/{failed.pk}/").content.decode()
    assert "simulator: the task exited with code 137 (simulated)" in page


def test_the_billing_page_has_usage_an_invoice_and_bank_transfers(tenant, enterprise):
    response = tenant.get("/billing/")
    page = response.content.decode()

    [invoice] = Invoice.objects.filter(organization=enterprise)
    assert invoice.number in page and invoice.number.startswith("INV-202602-")
    usage = response.context["usage"]
    daily = [sum(day) for day in zip(*(s["data"] for s in usage["series"]), strict=True)]
    assert sum(1 for amount in daily if amount > 0) >= 28  # used every day since it began
    assert {s["name"] for s in usage["series"]} >= {"a100.4x", "l40s.1x", "training tasks"}
    ledger = page[page.index('id="ledger"') :]
    # The transfer credited ten days ago, among the daily charges of the metering passes.
    credited = BankTransfer.objects.get(organization=enterprise, amount_minor=4_000_000)
    assert f"对公转账 {credited.reference}" in ledger
    assert ledger.count("Usage charge") >= 10
    transfers = rows(tenant.get("/billing/bank-transfers/").content.decode(), "data-transfer")
    shown = {
        text.split()[0]: (re.search(r"¥[\d,]+\.\d\d", text)[0], text) for text in transfers.values()
    }
    assert {ref: amount for ref, (amount, _text) in shown.items()} == {
        t.reference: f"¥{t.amount_minor // 100:,}.00"
        for t in BankTransfer.objects.filter(organization=enterprise)
    }
    states = sorted(
        "awaiting" if "Awaiting the transfer" in text else "credited"
        for _amount, text in shown.values()
        if "Awaiting the transfer" in text or "Credited" in text
    )
    assert states == ["awaiting", "credited", "credited"]


def test_the_invoice_lists_the_hosts_and_tasks_it_charged(tenant, enterprise):
    invoice = Invoice.objects.get(organization=enterprise)
    page = tenant.get(f"/billing/invoices/{invoice.pk}/").content.decode()

    for name in ("llm-sft-a100", "pretrain-h200", "notebook-910b", "qwen2-7b-sft", "bert-zh-ner"):
        assert name in page
    assert f"¥{invoice.total_minor / 100:,.2f}" in page


# --- the operator's console -----------------------------------------------------------------


def test_the_operators_overview_shows_a_busy_park_and_what_waits(operator, park):
    response = operator.get("/ops/")

    assert response.context["awaiting"] == 1
    assert response.context["queues"]["approvals"].length == 1
    # The demo enterprise's running hosts (7 cards) and task (2), the other enterprise's two
    # whole nodes (16): the stopped host holds none.
    assert response.context["totals"] == {"total": 84, "allocated": 25, "free": 59}
    for period, points in (("24h", 24 * 12), ("7d", 7 * 24), ("30d", 30 * 24)):
        series = operator.get(f"/ops/?period={period}").context["series"]
        assert series["points"] >= points
        assert max(series["allocated_pct"]) > min(series["allocated_pct"])  # not flat
        # Something ran all along (from the first morning of the story on).
        powered = [
            kw > 0 and util is not None
            for kw, util in zip(series["power_kw"], series["utilization_pct"], strict=True)
        ]
        assert sum(powered) >= 0.99 * len(powered) and series["energy_kwh"] > 0


def test_the_idle_page_lists_the_idle_hosts(operator, park):
    response = operator.get(f"/ops/parks/{park.pk}/idle/")

    idle = {row.instance.name: row for row in response.context["page"]}
    assert set(idle) == {"infer-edge-01", "mlu-bench"}
    assert idle["mlu-bench"].idle_minutes == 10 * 60
    assert idle["infer-edge-01"].idle_minutes == 7 * 60
    page = response.content.decode()
    assert "mlu-bench" in page and "infer-edge-01" in page and "llm-sft-a100" not in page


def test_the_approvals_page_has_the_newcomers_first_order(operator):
    response = operator.get("/ops/orders/")

    [order] = response.context["page"]
    assert order.state == OrderState.AWAITING_APPROVAL
    assert order.instance.name == "vision-train-01"
    page = response.content.decode()
    assert "vision-train-01" in page and "青禾视觉 (Demo)" in page and "Approve" in page


def test_the_verification_queue_has_the_newcomer(operator):
    page = operator.get("/ops/verifications/").content.decode()

    assert "青禾视觉科技（杭州）有限公司" in page and "91330106MA2H7QK38N" in page
    newcomer = Organization.objects.get(credit_code="91330106MA2H7QK38N")
    assert newcomer.verification_state == VerificationState.SUBMITTED
    assert operator.get(f"/ops/organizations/{newcomer.pk}/licence/").status_code == 200
    # The other enterprise was verified by the operator, weeks ago.
    verified = Organization.objects.get(credit_code="91320115MA1W8CF270")
    assert verified.verification_state == VerificationState.VERIFIED


def test_the_operators_billing_shows_revenue_by_month_and_the_top_tenants(operator, park):
    response = operator.get("/ops/billing/")

    revenue = {row["month"].strftime("%Y-%m"): row for row in response.context["revenue"]}
    assert revenue["2026-02"]["amount"] > 0 and revenue["2026-02"]["tenants"] == 2
    assert revenue["2026-03"]["tenants"] == 2
    page = response.content.decode()
    assert "长风自动驾驶 (Demo)" in page and "演示智能科技 (Demo AI)" in page


# --- the books ------------------------------------------------------------------------------


def test_each_wallet_is_the_sum_of_its_ledger_and_pays_exactly_what_was_metered(park):
    for wallet in Wallet.objects.filter(organization__park=park):
        entries = list(wallet.entries.order_by("created_at", "pk"))
        assert wallet.balance_minor == sum(entry.amount_minor for entry in entries)
        running = 0
        for entry in entries:  # each line's balance is the one before plus its amount
            running += entry.amount_minor
            assert entry.balance_after_minor == running
        charged = -sum(e.amount_minor for e in entries if e.kind == EntryKind.CHARGE)
        usage = UsageRecord.objects.filter(organization=wallet.organization)
        assert charged == (usage.aggregate(total=Sum("amount_minor"))["total"] or 0)
        paid_in = sum(e.amount_minor for e in entries if e.kind == EntryKind.TOP_UP)
        credited = BankTransfer.objects.filter(
            organization=wallet.organization, state=BankTransferState.CREDITED
        ).aggregate(total=Sum("received_minor"))["total"]
        assert paid_in == credited
        assert wallet.balance_minor > 0


def test_each_invoice_is_the_usage_it_covers(park):
    invoices = Invoice.objects.filter(organization__park=park)
    assert invoices.count() == 2  # February's, for the two enterprises that used something
    for invoice in invoices:
        covered = UsageRecord.objects.filter(
            organization=invoice.organization,
            started_at__gte=invoice.period_start,
            ended_at__lte=invoice.period_end,
        )
        assert set(covered) == set(invoice.usage_records.all())
        total = covered.aggregate(total=Sum("amount_minor"))["total"]
        assert invoice.total_minor == total > 0
        assert invoice.lines.aggregate(total=Sum("amount_minor"))["total"] == total
        assert invoice.subtotal_minor + invoice.tax_minor == total
        month = datetime(2026, 3, 1, tzinfo=timezone.get_current_timezone())
        assert invoice.period_end == month
        assert invoice.issued_at == month + timedelta(minutes=20)  # by the beat's hourly job


def test_usage_is_metered_to_the_second_of_the_story(park):
    """The metering passes measured what each host ran, from the moment it ran."""
    released = Instance.objects.get(name="pretrain-h200")
    compute = UsageRecord.objects.filter(workload__instance=released, kind=MeterKind.COMPUTE)
    ran = at(demo.day(7, 18, 40)) - at(demo.day(5, 9, 30))
    assert compute.aggregate(s=Sum("seconds"))["s"] == ran.total_seconds()
    assert compute.aggregate(s=Sum("amount_minor"))["s"] == amount_for(
        released.rates["flavor_hour"], int(ran.total_seconds())
    )
    # A stopped host pays for its disk only, from its stop on.
    stopped = Instance.objects.get(name="notebook-910b")
    stopped_at = at(demo.day(20, 19, 0))
    after = UsageRecord.objects.filter(workload__instance=stopped, started_at__gte=stopped_at)
    assert set(after.values_list("kind", flat=True)) == {MeterKind.DISK}
    assert not UsageRecord.objects.filter(
        workload__instance=stopped, kind=MeterKind.COMPUTE, ended_at__gt=stopped_at
    ).exists()
    # Metered by the daily passes up to this morning's midnight; the rest is the beat's.
    midnight = timezone.localtime(NOW).replace(hour=0, minute=0)
    assert UsageRecord.objects.aggregate(last=Max("ended_at"))["last"] == midnight


def test_the_story_happened_at_its_moments(park):
    order = Order.objects.get(instance__name="llm-sft-a100", kind="create")
    assert order.created_at == at(demo.day(2, 10, 5))
    submitted = AuditEvent.objects.get(action="order.submitted", object_id=str(order.pk))
    assert submitted.created_at == at(demo.day(2, 10, 5))
    stop = Order.objects.get(instance__name="notebook-910b", kind="stop")
    assert (stop.created_at, stop.state) == (at(demo.day(20, 19, 0)), OrderState.DONE)
    failed = Task.objects.get(name="bert-zh-ner")
    assert failed.started_at == at(demo.day(8, 15, 0))
    assert failed.finished_at - failed.started_at == timedelta(minutes=40)
    running = Task.objects.get(name="qwen2-7b-dpo")
    assert (running.state, running.started_at) == (TaskState.RUNNING, NOW - timedelta(hours=2))
    # The seed's clock is put back: the portal reads the real one (frozen here) again.
    assert timezone.now() == NOW
    assert timezone.now.__module__ == "django.utils.timezone"


def test_the_opening_balance_line_is_in_the_parks_language(park, enterprise, operator):
    opening = LedgerEntry.objects.get(wallet__organization=enterprise, kind=EntryKind.ADJUSTMENT)
    with translation.override("zh-hans"):
        assert opening.description == translation.gettext("Demo opening balance") == "演示期初余额"
    assert opening.amount_minor == demo.ENTERPRISE_OPENING_BALANCE_MINOR
    assert opening.created_at == at(demo.OPENING_BALANCE_AT)
    audit = AuditEvent.objects.get(action="billing.balance_adjusted")
    assert audit.actor == park.operators.get().user


# --- capacity samples -----------------------------------------------------------------------


def test_capacity_samples_cover_the_month_as_the_sampler_keeps_them(park):
    samples = CapacitySample.objects.filter(park=park)
    pools = Pool.objects.filter(backend__park=park).count()
    last_day = samples.filter(taken_at__gte=NOW - timedelta(hours=23))
    assert last_day.count() == pools * (23 * 12 + 1)  # every 5 minutes
    earlier = samples.filter(taken_at__lt=NOW - timedelta(days=1))
    assert {s.minute for s in earlier.values_list("taken_at", flat=True)} == {0}  # hourly
    assert samples.order_by("taken_at").first().taken_at <= NOW - timedelta(days=29, hours=23)
    h200 = samples.filter(pool__name="sh-center-h200")
    # While pretrain-h200 ran it held four cards: 4 × 700 W × PUE 1.25.
    during = h200.get(taken_at=at(demo.day(6, 12, 0)))
    assert (during.accelerators_allocated, during.watts) == (4, 3500)
    assert h200.get(taken_at=at(demo.day(8, 12, 0))).accelerators_allocated == 0
    # The idle host's card reads idle in the last hours, and not before it idled.
    mlu = samples.filter(pool__name="zj-hangzhou-mlu370x8")
    assert mlu.get(taken_at=NOW - timedelta(hours=1)).accelerators_idle == 1
    assert mlu.get(taken_at=NOW - timedelta(hours=11)).accelerators_idle == 0


# --- running it again -----------------------------------------------------------------------


def test_a_second_run_adds_nothing(seed):
    seed()
    first = row_counts()
    names = sorted(Instance.objects.values_list("name", flat=True))

    seed()

    assert row_counts() == first
    assert sorted(Instance.objects.values_list("name", flat=True)) == names


def test_a_run_a_day_later_brings_the_park_up_to_date(seed, clock, client):
    seed()
    before = row_counts()
    clock.move_to(NOW + timedelta(days=1))

    seed()

    after = row_counts()
    for label in (
        "orders.Instance",
        "orders.Order",
        "orchestration.Task",
        "billing.BankTransfer",
        "billing.Invoice",
        "tenants.Organization",
        "billing.Wallet",
    ):
        assert after[label] == before[label], label
    assert after["orchestration.CapacitySample"] > before["orchestration.CapacitySample"]
    assert CapacitySample.objects.aggregate(last=Max("taken_at"))["last"] == NOW + timedelta(days=1)
    midnight = timezone.localtime(NOW + timedelta(days=1)).replace(hour=0, minute=0)
    assert UsageRecord.objects.aggregate(last=Max("ended_at"))["last"] == midnight
    # The task that ended meanwhile is finished when it did, by the backend's own times.
    dpo = Task.objects.get(name="qwen2-7b-dpo")
    assert dpo.state == TaskState.SUCCEEDED
    assert dpo.finished_at == NOW + timedelta(hours=4)
    park = Park.objects.get(slug=demo.PARK["slug"])
    client.force_login(park.operators.get().user)
    idle = client.get(f"/ops/parks/{park.pk}/idle/").context["page"]
    assert {row.instance.name: row.idle_minutes for row in idle} == {
        "mlu-bench": 34 * 60,
        "infer-edge-01": 31 * 60,
    }


def test_a_park_seeded_before_the_story_gets_it_and_its_line_in_chinese(seed):
    """A park seeded by an earlier version: the opening balance a top-up, its line in English."""
    seed("--no-life")
    enterprise = Organization.objects.get(slug=demo.ENTERPRISE["slug"])
    wallet = Wallet.objects.get(organization=enterprise)
    LedgerEntry.objects.filter(wallet=wallet).update(
        kind=EntryKind.TOP_UP, description="Demo opening balance"
    )

    seed()

    [opening] = LedgerEntry.objects.filter(
        wallet=wallet, amount_minor=demo.ENTERPRISE_OPENING_BALANCE_MINOR
    )
    assert (opening.kind, opening.description) == (EntryKind.TOP_UP, "演示期初余额")
    assert not LedgerEntry.objects.filter(kind=EntryKind.ADJUSTMENT).exists()
    wallet.refresh_from_db()
    assert wallet.balance_minor == sum(wallet.entries.values_list("amount_minor", flat=True))
    assert Instance.objects.filter(organization=enterprise, state=InstanceState.RUNNING).count()


def test_without_its_life_the_park_has_its_catalog_logins_and_opening_balance(seed):
    seed("--no-life")

    enterprise = Organization.objects.get(slug=demo.ENTERPRISE["slug"])
    assert Wallet.objects.get(organization=enterprise).balance_minor == (
        demo.ENTERPRISE_OPENING_BALANCE_MINOR
    )
    assert LedgerEntry.objects.get().description == "演示期初余额"
    assert not Instance.objects.exists() and not Task.objects.exists()
    assert not CapacitySample.objects.exists()
    assert Organization.objects.count() == 1


# --- its links ------------------------------------------------------------------------------


def test_it_prints_its_links_on_the_portals_base_url(seed, settings):
    settings.LOAM_BASE_URL = "http://127.0.0.1:8123"
    assert "Portal:     http://127.0.0.1:8123/\n" in seed("--no-life")
    printed = seed("--no-life", "--base-url", "http://127.0.0.1:9000/")
    assert "Operations: http://127.0.0.1:9000/ops/\n" in printed
