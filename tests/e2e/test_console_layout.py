"""The console's layout in Chinese, the park's default language, on a desktop (1440 px) and a
phone (390 px): every main page of a tenant and of an operator fits the viewport's width (a wide
table scrolls inside its own container) and no button, column header or navigation link breaks
its label over two lines ("立即购/买"), and no sum of money is cut over two ("¥19,981. / 58").

Each page is saved full length as test-artifacts/<role>-<width>-<page>.png for a person to look
at; the live server runs the demo park (`seed_demo`) with a host, a training task and an
adjusted price, so lists, charts and the audit log are not empty.
"""

import io
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from apps.billing.transfers import (
    announce_bank_transfer,
    credit_bank_transfer,
    request_vat_invoice,
)
from apps.catalog.models import PriceKind
from apps.catalog.services import schedule_price
from apps.operations import demo
from apps.orchestration.scheduling import submit_task
from apps.orders.models import Instance
from apps.orders.services import HostRequest, submit_create
from apps.tenants.models import Organization, Park
from tests.e2e.browser import LAYOUT_PROBLEMS_JS, WIDTHS, chinese_browser, log_in

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 e2e@layout"
)


@pytest.fixture
def park_at_work(settings):
    """The demo park with the enterprise's host and training task, and a price an operator
    changed (so the audit log shows money)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", "--no-life", stdout=io.StringIO())
    park = Park.objects.get(slug=demo.PARK["slug"])
    enterprise = Organization.objects.get(slug=demo.ENTERPRISE["slug"])
    owner = enterprise.memberships.get(role="owner").user
    image = park.images.get(code="ubuntu2204-cuda124")
    (order,) = submit_create(
        organization=enterprise,
        actor=owner,
        request=HostRequest(
            flavor=park.flavor_families.get(code="a100").flavors.get(accelerator_count=1),
            image=image,
            region=park.regions.get(code="sh-center"),
            system_disk_gb=100,
            data_disk_gb=200,
            ssh_public_key=SSH_KEY,
            name="llm-finetune-a100-primary",
        ),
    )
    submit_task(
        organization=enterprise,
        actor=owner,
        data={"image": image, "command": "python train.py --epochs 3", "name": "qwen-sft"},
    )
    schedule_price(
        region=park.regions.get(code="sh-center"),
        operator=park.operators.get(user__email=demo.OPERATOR["email"]).user,
        kind=PriceKind.DISK_GB_MONTH,
        amount_minor=40,
    )
    operator = park.operators.get(user__email=demo.OPERATOR["email"]).user
    paid, _awaiting = (
        announce_bank_transfer(organization=enterprise, actor=owner, amount_minor=500_000)
        for _ in range(2)
    )
    credit_bank_transfer(transfer_id=paid.pk, operator=operator, received_minor=500_000)
    request_vat_invoice(
        organization=enterprise,
        actor=owner,
        kind="special",
        amount_minor=200_000,
        title=enterprise.name,
        taxpayer_id="91310000MA1FL3X63G",
        email=owner.email,
        address_phone="上海市浦东新区张江路 1 号 021-55550000",
        bank_account="示范银行张江支行 6222 0000 0000 0000",
    )
    return park, Instance.objects.get(pk=order.instance_id)


def tenant_pages(park, instance) -> dict[str, str]:
    return {
        "home": "/",
        "catalog": "/catalog/",
        "catalog-table": "/catalog/?view=table",
        "order-form": "/instances/new/?flavor=a100.1x",
        "instances": "/instances/",
        "instance": f"/instances/{instance.pk}/",
        "tasks": "/tasks/",
        "task-form": "/tasks/new/",
        "billing": "/billing/",
        "bank-transfers": "/billing/bank-transfers/",
        "vat-invoices": "/billing/vat-invoices/",
    }


def operator_pages(park, instance) -> dict[str, str]:
    return {
        "ops-home": "/ops/",
        "pools": f"/ops/parks/{park.pk}/pools/",
        "nodes": f"/ops/parks/{park.pk}/nodes/",
        "tenants": "/ops/organizations/",
        "verification": "/ops/verifications/",
        "audit-log": "/ops/audit/",
        "scheduling-policy": f"/ops/tasks/policy/{park.pk}/",
        "billing": "/ops/billing/",
        "receivables": "/ops/billing/receivables/",
    }


def check_pages(page: Page, base_url: str, role: str, pages: dict[str, str]) -> dict:
    """Visit every page at both widths; {"<role>-<width>-<page>": [problems]} for the bad ones."""
    ARTIFACTS.mkdir(exist_ok=True)
    found = {}
    for width, height in WIDTHS.values():
        page.set_viewport_size({"width": width, "height": height})
        for name, path in pages.items():
            page.goto(base_url + path)
            page.wait_for_load_state("networkidle")  # HTMX fragments (the live quote) are in
            expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
            page.screenshot(path=str(ARTIFACTS / f"{role}-{width}-{name}.png"), full_page=True)
            problems = page.evaluate(LAYOUT_PROBLEMS_JS)
            if problems:
                found[f"{role}-{width}-{name}"] = problems
        if width < 992:  # the collapsed main navigation, opened
            page.goto(base_url + next(iter(pages.values())))
            page.locator(".navbar-toggler").click()
            expect(page.locator("#main-nav")).to_have_class(re.compile(r"\bshow\b"))
            page.wait_for_timeout(400)  # the collapse animation
            page.screenshot(path=str(ARTIFACTS / f"{role}-{width}-navigation.png"), full_page=True)
            problems = page.evaluate(LAYOUT_PROBLEMS_JS)
            if problems:
                found[f"{role}-{width}-navigation"] = problems
    return found


@pytest.mark.django_db(transaction=True)
def test_tenant_console_fits_desktop_and_phone(browser, live_server, park_at_work):
    park, instance = park_at_work
    page = chinese_browser(browser, live_server.url)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, live_server.url, demo.OWNER)
    assert page.url.rstrip("/") == live_server.url  # a tenant lands on the console home
    expect(page.locator("#home-hosts")).to_contain_text("1")

    found = check_pages(page, live_server.url, "tenant", tenant_pages(park, instance))

    assert found == {}
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_operator_console_fits_desktop_and_phone(browser, live_server, park_at_work):
    park, instance = park_at_work
    page = chinese_browser(browser, live_server.url)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page, live_server.url, demo.OPERATOR)
    page.wait_for_url(re.compile(r"/ops/$"))

    found = check_pages(page, live_server.url, "operator", operator_pages(park, instance))

    assert found == {}
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_visitor_pages_fit_desktop_and_phone(browser, live_server, park_at_work):
    """The landing page, the public catalog and price list and the sign-in and sign-up pages,
    styled like the console, with the product's Chinese words (邮箱, not "Email地址")."""
    page = chinese_browser(browser, live_server.url)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    pages = {
        "landing": "/",
        "catalog": "/catalog/",
        "pricing": "/pricing/",
        "log-in": "/accounts/login/",
        "sign-up": "/accounts/signup/",
        "password-reset": "/accounts/password/reset/",
    }

    found = check_pages(page, live_server.url, "visitor", pages)

    assert found == {}
    assert errors == []
    page.goto(live_server.url + "/accounts/signup/")
    expect(page.locator("label[for=id_email]")).to_have_text("邮箱")
    expect(page.locator("body")).not_to_contain_text("Email")


@pytest.mark.django_db(transaction=True)
def test_the_catalog_table_needs_no_sideways_scroll_at_1440(browser, live_server, park_at_work):
    """Issue 35: at 1440 px the catalog table fits beside the filters; its container does not
    scroll sideways (a phone may still scroll it)."""
    page = chinese_browser(browser, live_server.url)
    log_in(page, live_server.url, demo.OWNER)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/catalog/?view=table")
    table = page.locator("#flavor-table")
    expect(table.locator("tr.flavor-row").first).to_be_visible()
    overflow = table.evaluate(
        "t => { const box = t.closest('.table-responsive');"
        " return box.scrollWidth - box.clientWidth; }"
    )
    assert overflow <= 0
