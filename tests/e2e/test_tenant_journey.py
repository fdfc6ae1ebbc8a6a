"""A tenant's journey through the real pages in Chromium: log in, filter the catalog, read a
flavor, order it with a live quote, watch it come up, resize it, grow its disk and release it.

The live server runs the demo park (`seed_demo`) with Celery eager, so a host is provisioned
while its order request is answered; the instance page polls every 2 s while it is busy.
"""

import base64
import io
import re
import struct

import pytest
from django.core.management import call_command
from playwright.sync_api import Page, expect

from apps.operations import demo
from apps.orchestration.models import Node
from apps.orders.models import Instance

SSH_KEY = (
    "ssh-ed25519 "
    + base64.b64encode(
        struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes(range(32))
    ).decode()
    + " journey@laptop"
)
TIMEOUT_MS = 15_000  # the demo simulator takes 1–3 s a call, inside the request


def cards(page: Page):
    return page.locator("#flavor-list .flavor-card")


def card_codes(page: Page) -> set[str]:
    return {code for code in cards(page).evaluate_all("els => els.map(e => e.dataset.flavor)")}


@pytest.mark.django_db(transaction=True)
def test_tenant_journey(page: Page, live_server, screenshot, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", "--no-life", stdout=io.StringIO())
    # The operators drained the H200 nodes: H200 flavors are listed but not available now.
    Node.objects.filter(pool__accelerator_model__name="H200 SXM").update(is_drained=True)
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))

    # 1. Log in through allauth's form.
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="login"]', demo.OWNER["email"])
    page.fill('input[name="password"]', demo.OWNER["password"])
    screenshot("login-form")
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    expect(page.locator("#nav-account")).to_have_text(demo.OWNER["email"])
    screenshot("logged-in")

    # 2. The catalog: every demo flavor.
    page.goto(f"{live_server.url}/catalog/")
    expect(cards(page)).to_have_count(24)
    screenshot("catalog")

    # 3. Filter without a reload: the list is swapped and the URL pushed.
    page.evaluate("window.__sameDocument = true")
    page.select_option("#id_vendor", "nvidia")
    page.wait_for_url(re.compile(r"/catalog/\?.*vendor=nvidia"))
    expect(cards(page)).to_have_count(12)  # H200, A100 and L40S, 4 sizes each
    assert all(code.split(".")[0] in {"h200", "a100", "l40s"} for code in card_codes(page))
    screenshot("catalog-nvidia")

    page.check("#id_available")
    page.wait_for_url(re.compile(r"/catalog/\?.*available=on"))
    expect(cards(page)).to_have_count(8)  # the drained H200s drop out
    assert card_codes(page) == {f"{p}.{n}x" for p in ("a100", "l40s") for n in (1, 2, 4, 8)}
    assert page.evaluate("window.__sameDocument") is True  # no page load happened
    assert "vendor=nvidia" in page.url
    screenshot("catalog-nvidia-available")

    # 4. A flavor's page: its family, images of its stack only, its price.
    page.locator('#flavor-list a[href="/catalog/flavors/a100.1x/"]').first.click()
    page.wait_for_url("**/catalog/flavors/a100.1x/")
    expect(page.locator("h1")).to_have_text("a100.1x")
    expect(page.locator("#family tbody tr")).to_have_count(4)
    expect(page.locator("#images li")).to_have_count(3)  # Debian, PyTorch, Ubuntu · CUDA
    expect(page.locator("#images")).to_contain_text("CUDA 12.4")
    expect(page.locator("#prices")).to_contain_text("¥18.00")
    screenshot("flavor")

    # 5. The order form, with the live quote.
    page.locator('a[href="/instances/new/?flavor=a100.1x"]').click()
    page.wait_for_url("**/instances/new/?flavor=a100.1x")
    expect(page.locator("#id_flavor")).to_have_value("a100.1x")
    expect(page.locator("#id_image option")).to_have_count(3)
    page.fill("#id_name", "journey-host")
    page.fill("#id_ssh_public_key", SSH_KEY)
    page.fill("#id_data_disk_gb", "100")
    page.locator("#id_data_disk_gb").dispatch_event("change")
    # 1800 fen + 100 GB × 35 / 720 + 10 Mbps × 2300 / 720 = 1836.81 fen, to the fen, landing
    # in the Shanghai center.
    expect(page.locator("#quote-hourly")).to_have_text("¥18.37")
    expect(page.locator("#quote-region")).to_contain_text("上海算力中心")
    screenshot("order-form-quoted")

    # 6. Order: the instance page, running, with its SSH command.
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    # Polled every 2 s while busy; with eager Celery it is usually running at once.
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    instance = Instance.objects.get(name="journey-host")
    assert instance.access["address"].startswith("198.18.")
    expect(page.locator("#ssh-command")).to_have_text(
        f"ssh -p 22 root@{instance.access['address']}"
    )
    expect(page.locator("#instance-flavor")).to_contain_text("a100.1x")
    expect(page.locator("#instance-disk")).to_have_text("100 GB")
    # The whole page (layout and flash message), not only the status partial.
    expect(page.locator("nav.navbar")).to_be_visible()
    expect(page.locator(".alert-success")).to_have_count(1)
    screenshot("instance-running")

    # 7. Resize within the family.
    page.select_option("#resize-form select[name=flavor]", "a100.2x")
    page.locator("#resize-form button[type=submit]").click()
    expect(page.locator("#instance-flavor")).to_contain_text("a100.2x")
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    expect(page.locator(".alert-success")).to_have_count(1)  # this operation's message only
    screenshot("resized")

    # 8. Expand the cloud disk.
    page.fill("#disk-form input[name=data_disk_gb]", "500")
    page.locator("#disk-form button[type=submit]").click()
    expect(page.locator("#instance-disk")).to_have_text("500 GB")
    screenshot("disk-expanded")

    # 9. Release it, accepting the confirmation.
    page.locator("#release-button").click()
    page.locator("#confirm-dialog-ok").click()  # the page's own dialog
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
    expect(page.locator("#ssh-command")).to_have_count(0)
    expect(page.locator("#instance-actions")).to_have_count(0)
    screenshot("released")

    instance.refresh_from_db()
    assert (instance.state, instance.flavor.code, instance.data_disk_gb) == (
        "released",
        "a100.2x",
        500,
    )
    assert page_errors == []
