"""Each role's journey in Chinese, in Chromium, at a desktop's width and then a phone's: a new
enterprise signing up, the demo tenant working with a host, the park's operator at work. Each
asserts what a paying user would mind (issue 35): quota warnings before an order fails, a cost
that never runs backwards, an operation's progress, the demo's populated pages, and no page that
breaks a sum of money or a label over two lines. Screenshots of every step are kept in
test-artifacts/screenshots/<test>/.
"""

import io
import re
from decimal import Decimal

import pytest
from django.core import mail
from django.core.management import call_command
from playwright.sync_api import Page, expect

from apps.operations import demo
from apps.orders.models import Instance, Order
from apps.orders.tasks import fulfil_order
from apps.tenants.models import Organization
from tests.e2e.browser import LAYOUT_PROBLEMS_JS, WIDTHS, chinese_browser, log_in

SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 e2e@roles"
)
PASSWORD = "a-long-journey-password-42"


@pytest.fixture
def demo_park(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=io.StringIO())


@pytest.fixture
def page(browser, live_server):
    """The journeys' browser, in Chinese (the `screenshot` fixture shoots this page)."""
    page = chinese_browser(browser, live_server.url)
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["desktop"], strict=True)))
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    assert errors == [], errors


def fits(page: Page) -> None:
    """The page has no layout problem (LAYOUT_PROBLEMS_JS) at the width it is shown at."""
    page.wait_for_load_state("networkidle")
    assert page.evaluate(LAYOUT_PROBLEMS_JS) == [], page.url


def at_phone_width(page: Page, base_url: str, paths: list[str], screenshot) -> None:
    """Every page of the journey again at 390 px: it fits, with nothing cut or wrapped."""
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["phone"], strict=True)))
    for path in paths:
        page.goto(base_url + path)
        fits(page)
        screenshot("phone-" + (path.strip("/").replace("/", "-").split("?")[0] or "home"))


def money(text: str) -> Decimal:
    """The first sum of money in `text` (¥1,234.56) as a number."""
    match = re.search(r"[¥$]\s?(-?[0-9][0-9,]*(?:\.[0-9]+)?)", text)
    assert match, text
    return Decimal(match.group(1).replace(",", ""))


# --- A new enterprise ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_new_enterprise_signs_up_and_is_warned_before_an_order_would_fail(
    page, live_server, screenshot, demo_park
):
    base = live_server.url
    email = "founder@new-enterprise.example"

    # Sign up; the confirmation link comes by e-mail.
    page.goto(base + "/accounts/signup/")
    expect(page.locator("body")).to_contain_text("邮箱")
    expect(page.locator("body")).not_to_contain_text("帐号")
    page.fill('input[name="email"]', email)
    page.fill('input[name="password1"]', PASSWORD)
    page.fill('input[name="password2"]', PASSWORD)
    screenshot("sign-up")
    page.locator('form:has(input[name="password2"]) button[type="submit"]').click()
    page.wait_for_url("**/accounts/confirm-email/")
    (message,) = mail.outbox
    link = re.search(r"https?://\S+/accounts/confirm-email/\S+/", message.body).group(0)
    page.goto(link)
    page.locator('form[action*="confirm-email"] button[type="submit"]').click()
    log_in(page, base, {"email": email, "password": PASSWORD})

    # The enterprise: the terms must be accepted, and it says so.
    page.goto(base + "/org/new/")
    page.fill('input[name="name"]', "新创智算")
    create = page.locator('form:has(input[name="name"]) button[type="submit"]')
    create.click()
    expect(page.locator(".invalid-feedback")).to_contain_text("请先接受服务条款")
    screenshot("terms-refused")
    page.check('input[name="accept_terms"]')
    create.click()
    page.wait_for_url("**/org/")
    organization = Organization.objects.get(name="新创智算")
    assert organization.terms_accepted_at is not None
    screenshot("enterprise-created")

    # The catalog: an unverified enterprise may hold 8 compute units; an H200 (9.89) is over
    # it, and its card says so instead of offering to order it.
    page.goto(base + "/catalog/")
    over = page.locator('.flavor-card[data-flavor="h200.1x"]')
    expect(over.locator(".quota-refusal")).to_contain_text("超出")
    expect(over.locator("text=立即购买")).to_have_count(0)
    within = page.locator('.flavor-card[data-flavor="a100.1x"]')
    expect(within.locator(".quota-refusal")).to_have_count(0)
    expect(within.locator("text=立即购买")).to_have_count(1)
    screenshot("catalog-quota")

    # The quote of four A100 cards (two allowed) warns before the order is sent.
    page.goto(base + "/instances/new/?flavor=a100.4x")
    page.fill("#id_name", "first-host")
    page.fill("#id_ssh_public_key", SSH_KEY)
    page.locator("#id_name").dispatch_event("change")
    expect(page.locator("#quote-problems")).to_contain_text("超出")
    quotas = page.locator("#quote-quotas")
    expect(quotas).to_be_visible()
    assert not re.search(r"\d\.\d{3}\b", quotas.inner_text())  # 8, not 8.000
    screenshot("quote-over-quota")
    fits(page)

    at_phone_width(page, base, ["/catalog/", "/instances/new/?flavor=a100.4x", "/org/"], screenshot)


# --- The demo tenant ----------------------------------------------------------------------------


def cost_so_far(page: Page) -> Decimal:
    return money(page.locator("#instance-cost").inner_text())


@pytest.mark.django_db(transaction=True)
def test_the_demo_tenant_finds_a_working_park_and_its_cost_never_runs_backwards(
    page, live_server, screenshot, demo_park, monkeypatch
):
    base = live_server.url
    log_in(page, base, demo.OWNER)

    # A month of life: hosts running, money spent, a bill issued, tasks finished and failed.
    page.goto(base + "/")
    expect(page.locator("#home-host-rows tr")).not_to_have_count(0)
    assert money(page.locator("#spend-month").inner_text()) > 0
    screenshot("home")
    page.goto(base + "/billing/")
    expect(page.locator('#invoices a[href^="/billing/invoices/"]')).not_to_have_count(0)
    screenshot("billing")
    page.goto(base + "/tasks/")
    expect(page.locator("body")).to_contain_text("成功")
    expect(page.locator("body")).to_contain_text("失败")
    screenshot("tasks")

    # The host list: released hosts hidden, each row with its actions.
    page.goto(base + "/instances/")
    expect(page.locator("tr[data-instance]")).not_to_have_count(0)
    expect(page.locator('.state-badge[data-state="released"]')).to_have_count(0)
    running_row = page.locator('tr[data-instance]:has([data-state="running"])').first
    expect(running_row.locator('[data-action="stop"]')).to_be_visible()
    expect(running_row.locator("code")).to_contain_text("ssh -p")
    screenshot("hosts")

    # Order a host; its page watches it.
    page.goto(base + "/instances/new/?flavor=a100.1x")
    page.fill("#id_name", "journey-a100")
    page.fill("#id_ssh_public_key", SSH_KEY)
    page.fill("#id_data_disk_gb", "200")
    page.locator("#id_data_disk_gb").dispatch_event("change")
    expect(page.locator("#quote-hourly")).to_contain_text("¥")
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    expect(page.locator("#host-monitoring")).to_be_visible()
    expect(page.locator("#host-monitoring")).to_contain_text("模拟")
    host = Instance.objects.get(name="journey-a100")
    costs = [cost_so_far(page)]
    screenshot("host-running")

    # Stop it from the list's row: back on the list, no SSH line while stopped.
    page.goto(base + "/instances/")
    row = page.locator(f'tr[data-instance="{host.pk}"]')
    row.locator('[data-action="stop"]').click()
    page.wait_for_url("**/instances/")
    expect(row.locator('[data-action="start"]')).to_be_visible()
    expect(row.locator("code")).to_have_count(0)
    page.goto(f"{base}/instances/{host.pk}/")
    expect(page.locator("#ssh-command")).to_have_count(0)
    costs.append(cost_so_far(page))

    # Start it and resize it within the family.
    page.locator("#start-button").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    costs.append(cost_so_far(page))
    page.select_option("#resize-form select[name=flavor]", "a100.2x")
    page.locator("#resize-form button[type=submit]").click()
    expect(page.locator("#instance-flavor")).to_contain_text("a100.2x")
    costs.append(cost_so_far(page))
    screenshot("resized")

    # A disk expansion shows its progress until the backend is done, then the new size.
    with monkeypatch.context() as held:
        sent = []
        held.setattr(fulfil_order, "delay", lambda order_id: sent.append(order_id))
        page.fill("#disk-form input[name=data_disk_gb]", "500")
        page.locator("#disk-form button[type=submit]").click()
        progress = page.locator("#operation-progress")
        expect(progress).to_contain_text("200 → 500")
        expect(progress.locator(".spinner-border")).to_be_visible()
        expect(page.locator("#instance-disk")).to_have_text("200 GB")
        screenshot("disk-expanding")
    (order_id,) = sent
    fulfil_order(order_id)  # the worker takes the job; the page, polling, shows it done
    expect(page.locator("#instance-disk")).to_have_text("500 GB")
    expect(page.locator("#operation-progress")).to_have_count(0)
    assert Order.objects.get(pk=order_id).state == "done"
    costs.append(cost_so_far(page))
    screenshot("disk-expanded")

    # Release it: the figure it ends at is its bill so far, never less than what it showed.
    page.locator("#release-button").click()
    page.locator("#confirm-dialog-ok").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
    costs.append(cost_so_far(page))
    screenshot("released")
    assert costs == sorted(costs), costs

    at_phone_width(
        page, base, ["/", "/instances/", f"/instances/{host.pk}/", "/billing/", "/tasks/"],
        screenshot,
    )  # fmt: skip


# --- The park's operator ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_operator_opens_on_a_park_at_work(page, live_server, screenshot, demo_park):
    base = live_server.url
    park = Organization.objects.get(slug=demo.ENTERPRISE["slug"]).park
    log_in(page, base, demo.OPERATOR)

    # The overview: something waits for a decision, and thirty days of capacity are drawn.
    page.goto(base + "/ops/")
    assert int(page.locator("#awaiting-verification").inner_text()) >= 1
    assert int(page.locator("#awaiting-approval").inner_text()) >= 1
    expect(page.locator("#chart-utilization canvas")).not_to_have_count(0)
    expect(page.locator("#no-samples")).to_have_count(0)
    fits(page)
    screenshot("overview")

    # Idle hosts for the idle policy, an enterprise to verify.
    page.goto(f"{base}/ops/parks/{park.pk}/idle/")
    expect(page.locator("#idle-rows tr")).not_to_have_count(0)
    screenshot("idle")
    page.goto(base + "/ops/verifications/")
    expect(page.locator("#verification-queue")).not_to_contain_text("演示智能科技")
    expect(page.locator("#verification-queue tbody tr")).not_to_have_count(0)
    screenshot("verifications")

    # An order waiting for approval: approved, it runs.
    page.goto(base + "/ops/orders/")
    waiting = Order.objects.filter(state="awaiting_approval").select_related("instance")
    order = waiting.first()
    assert order is not None
    row = page.locator(f"#order-{order.pk}")
    row.locator('input[name="decision"][value="approve"] + input + button').click()
    expect(page.locator(f"#order-{order.pk}")).not_to_contain_text("批准")
    order.refresh_from_db()
    assert order.state in {"fulfilling", "done"}
    screenshot("approved")

    # Draining a node asks first; declining leaves it as it was.
    page.goto(f"{base}/ops/parks/{park.pk}/nodes/")
    node_row = page.locator('.node-row[data-drained="false"]').first
    node_row.locator(".drain-button").click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    screenshot("drain-asks")
    page.locator("#confirm-dialog .btn-secondary, #confirm-dialog [data-bs-dismiss]").first.click()
    expect(node_row).to_have_attribute("data-drained", "false")

    at_phone_width(
        page, base, ["/ops/", f"/ops/parks/{park.pk}/idle/", "/ops/orders/", "/ops/verifications/"],
        screenshot,
    )  # fmt: skip
