"""An operator's day in Chromium: log in, read the overview (capacity charts drawn by the
vendored ECharts), approve an organization's verification after looking at its licence,
approve an order inline, and drain a node; then the same console in Chinese.

The live server runs the demo park (`seed_demo`) with Celery eager, so an approved host is
provisioned while the approval is answered.
"""

import io
import re
import struct
import zlib
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.operations import demo
from apps.orchestration.capacity import sample_capacity
from apps.orchestration.models import Allocation, Backend, Node
from apps.orchestration.services import probe_backend
from apps.orders.models import ApprovalPolicy, Order, OrderState
from apps.orders.services import HostRequest, submit_create
from apps.tenants.models import Organization, Park, VerificationState
from apps.tenants.services import create_organization, submit_verification
from tests.factories import UserFactory, credit_code

TIMEOUT_MS = 15_000
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 ops@e2e"


def png(width=320, height=200) -> bytes:
    """A small solid PNG: the licence scan the operator looks at."""
    row = b"\x00" + bytes((230, 236, 245)) * width
    raw = zlib.compress(row * height)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def park_with_work(park):
    """A submitted verification, an order waiting for approval and a day of capacity samples."""
    applicant = UserFactory(email="founder@newco.localhost")
    newco = create_organization(user=applicant, park=park, name="NewCo Robotics")
    submit_verification(
        organization=newco,
        actor=applicant,
        legal_name="新公司机器人（苏州）有限公司",
        credit_code=credit_code(4242),
        licence=SimpleUploadedFile("licence.png", png(), content_type="image/png"),
    )
    enterprise = Organization.objects.get(slug=demo.ENTERPRISE["slug"])
    owner = enterprise.memberships.get(role="owner").user
    # No simulated latency, and a third of the accelerators reading idle.
    Backend.objects.filter(park=park).update(config={"seed": 7, "idle_share": 0.3})

    def order(code, name):
        family, size = code.split(".")
        return submit_create(
            organization=enterprise,
            actor=owner,
            request=HostRequest(
                flavor=park.flavor_families.get(code=family).flavors.get(
                    accelerator_count=int(size.rstrip("x"))
                ),
                image=park.images.get(code="ubuntu2204-cuda124"),
                region=park.regions.get(code="sh-center"),
                system_disk_gb=100,
                ssh_public_key=SSH_KEY,
                name=name,
            ),
        )[0]

    # A day of samples while the enterprise starts hosts through it.
    now = timezone.now()
    starts = {40: "a100.1x", 34: "a100.1x", 26: "h200.1x", 18: "a100.1x", 10: "h200.1x"}
    for step in range(48, -1, -1):
        at = now - timedelta(minutes=30 * step)
        if step in starts:  # the host started then (its accelerators are its from then on)
            started = order(starts[step], f"batch-{step}")
            Allocation.objects.filter(workload__instance=started.instance_id).update(created_at=at)
        for backend in Backend.objects.filter(park=park):
            probe_backend(backend=backend, now=at)
        sample_capacity(now=at)
    ApprovalPolicy.objects.update_or_create(park=park, defaults={"max_accelerators": 1})
    waiting = order("a100.2x", "needs-approval")
    assert waiting.state == OrderState.AWAITING_APPROVAL
    return newco, waiting


@pytest.mark.django_db(transaction=True)
def test_operator_journey(page: Page, live_server, screenshot, settings, tmp_path):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.MEDIA_ROOT = tmp_path
    call_command("seed_demo", "--no-life", stdout=io.StringIO())
    park = Park.objects.get(slug=demo.PARK["slug"])
    newco, order = park_with_work(park)
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))

    # 1. Log in as the park's operator: the back office is where they land.
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="login"]', demo.OPERATOR["email"])
    page.fill('input[name="password"]', demo.OPERATOR["password"])
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(re.compile(r"/ops/$"))

    # 2. The overview: what waits, capacity by level, site and vendor, and the charts.
    expect(page.locator("#awaiting-verification")).to_have_text("1")
    expect(page.locator("#awaiting-approval")).to_have_text("1")
    expect(page.locator("#breakdown")).to_contain_text("上海算力中心")
    expect(page.locator("#chart-utilization canvas")).to_have_count(1)
    expect(page.locator("#chart-power canvas")).to_have_count(1)
    assert page.evaluate("typeof echarts") == "object"
    screenshot("overview")

    # 3. The verification queue, the organization's page with its licence, and approval.
    page.locator("nav.ops-subnav >> text=Verifications").click()
    page.wait_for_url("**/ops/verifications/")
    expect(page.locator("#verification-queue tbody tr")).to_have_count(1)
    expect(page.locator("#verification-queue")).to_contain_text("NewCo Robotics")
    screenshot("verification-queue")
    page.locator("#verification-queue >> text=Review").click()
    page.wait_for_url(f"**/ops/organizations/{newco.pk}/")
    licence = page.locator('img[alt="Business licence"]')
    expect(licence).to_be_visible()
    assert licence.evaluate("img => img.naturalWidth") == 320  # the scan was served
    expect(page.locator("#wallet")).to_contain_text("No wallet yet.")
    screenshot("organization-review")
    page.locator("#verification-decision >> text=Approve verification").click()
    page.wait_for_url("**/ops/verifications/")
    expect(page.locator(".alert-success")).to_contain_text("NewCo Robotics is verified.")
    expect(page.locator("#verification-queue")).to_contain_text("Nothing waits for review.")
    screenshot("verification-approved")
    newco.refresh_from_db()
    assert newco.verification_state == VerificationState.VERIFIED

    # 4. The approval queue: approve the order inline (no page load).
    page.locator("nav.ops-subnav >> text=Orders").click()
    page.wait_for_url("**/ops/orders/")
    row = page.locator(f"#order-{order.pk}")
    expect(row).to_contain_text("a100.2x")
    screenshot("orders-awaiting")
    page.evaluate("window.__sameDocument = true")
    row.locator("button", has_text="Approve").click()
    expect(page.locator(f"#order-{order.pk}")).to_have_attribute(
        "data-state", re.compile("fulfilling|done")
    )
    expect(page.locator(f"#order-{order.pk} [role=status]")).to_contain_text(f"Order #{order.pk}")
    assert page.evaluate("window.__sameDocument") is True
    screenshot("order-approved")
    order.refresh_from_db()
    assert order.state in (OrderState.FULFILLING, OrderState.DONE)
    assert order.decided_by.email == demo.OPERATOR["email"]
    host_node = order.instance.node

    # 5. Nodes: drain the host's node; the host stays on it.
    page.locator("#ops-infra-menu").click()
    page.locator(".dropdown-menu >> text=Nodes").click()
    page.wait_for_url(f"**/ops/parks/{park.pk}/nodes/")
    node_row = page.locator(f"#node-{host_node.pk}")
    node_row.locator('input[name="reason"]').fill("Firmware update")
    node_row.locator("button.drain-button").click()
    expect(page.locator("#confirm-dialog-message")).to_contain_text(host_node.hostname)
    assert not Node.objects.get(pk=host_node.pk).is_drained  # asked first, like other decisions
    page.locator("#confirm-dialog-ok").click()
    expect(page.locator(f"#node-{host_node.pk}")).to_have_attribute("data-drained", "true")
    expect(page.locator(f"#node-{host_node.pk} [role=status]")).to_contain_text("no new placements")
    screenshot("node-drained")
    assert Node.objects.get(pk=host_node.pk).is_drained
    assert Order.objects.get(pk=order.pk).instance.node_id == host_node.pk

    # 6. The same console in Chinese, the park's default language.
    page.context.add_cookies(
        [{"name": "django_language", "value": "zh-hans", "url": live_server.url}]
    )
    page.goto(f"{live_server.url}/ops/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("#chart-utilization canvas")).to_have_count(1)
    screenshot("overview-zh-hans")
    page.goto(f"{live_server.url}/ops/parks/{park.pk}/idle/")
    expect(page.locator("#idle-rows .idle-row").first).to_be_visible()
    screenshot("idle-capacity-zh-hans")

    assert page_errors == []
