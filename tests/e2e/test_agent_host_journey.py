"""A GPU cloud host ordered in the browser runs as a real container on a real host agent.

A `loam-agent` enrols with a join token and serves the live portal (tests/agent_server.py), its
uplink facing an outside world of network namespaces (tests/outside_world.py); the tenant
orders a host in Chromium, copies the SSH line and connects from the outside with their key
through the server's public port, finds the card bound in,
sees the card's figures on the instance page, stops it (the card is free for others), starts
it again, resizes it to two cards, releases it, and nothing is left on the server. Celery runs
eagerly in the live server, so the order's request waits while the agent creates the host.
"""

import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from loam_agent.hosts.runtime import host_key
from playwright.sync_api import Page, expect

from apps.orchestration.models import Accelerator
from apps.orders.models import Instance
from tests.agent_server import (
    build_agent_park,
    require_hosts,
    ssh_answers,
    start_agent_server,
)
from tests.outside_world import PUBLIC_ADDRESS, outside

# The agent heartbeats and reports while the browser works: real concurrent writes, which
# SQLite's shared in-memory test database answers with "database table is locked".
pytestmark = [pytest.mark.containers, pytest.mark.postgres]
PASSWORD = "agent-journey-password-1"
TIMEOUT_MS = 30_000


@pytest.fixture
def can_run_hosts():
    require_hosts()


def wait_until(check, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_host_ordered_in_the_browser_is_a_real_container(
    page: Page, live_server, screenshot, settings, tmp_path, can_run_hosts, outside_world
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    park = build_agent_park(quota=2)
    park.owner.set_password(PASSWORD)
    park.owner.save()
    server = start_agent_server(
        pool=park.pool,
        operator=park.operator,
        portal_url=live_server.url,
        work=tmp_path / "server",
        cards=2,
    )
    try:
        cards = Accelerator.objects.filter(node__pool=park.pool)
        wait_until(lambda: cards.count() == 2)
        key = tmp_path / "tenant_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        host_id, access = journey(page, live_server, screenshot, park, key)
        wait_until(lambda: not server.host_folders())
        assert not Path(f"/run/netns/loam-{host_key(host_id)}").exists()
        # No rule of the host is left: its port is free, and refused from outside.
        rules = subprocess.run(["nft", "list", "table", "inet", "loam"], capture_output=True)
        assert f"dport {access['ssh_port']} " not in rules.stdout.decode()
        assert outside_ssh(f"ssh -p {access['ssh_port']} root@{PUBLIC_ADDRESS}", key).returncode
        assert not cards.filter(allocation__isnull=False).exists()
    finally:
        server.stop()


def outside_ssh(ssh_line: str, key: Path) -> subprocess.CompletedProcess:
    """The instance page's SSH line as the tenant runs it on their laptop, with their key."""
    options = ["-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"]
    options += ["-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=2", "-q"]
    ssh, *arguments = shlex.split(ssh_line)
    return outside(ssh, *options, *arguments, "true", timeout=15)


def network_journey(page: Page, live_server, screenshot, instance, access, key: Path) -> None:
    """A port mapping reached from the outside at the URL the page gives; then a security
    group that lets in SSH only closes the mapped port, live."""
    serve = "cd /tmp && echo served > index.html && (setsid python3 -m http.server 8888 &)"
    assert ssh_answers(access, key, f"{serve} >/dev/null 2>&1").returncode == 0
    page.select_option("#port-mapping-form select[name=protocol]", "tcp")
    page.fill("#port-mapping-form input[name=host_port]", "8888")
    page.locator("#port-mapping-form button[type=submit]").click()
    link = page.locator("#port-mappings a").first
    expect(link).to_contain_text(f"{PUBLIC_ADDRESS}:")
    url = link.get_attribute("href")
    wait_until(lambda: outside("curl", "-sf", "-m", "2", url).stdout == "served\n", seconds=10)
    screenshot("agent-host-port-mapping")

    page.goto(f"{live_server.url}/security-groups/")
    page.fill("#security-group-create input[name=name]", "ssh-only")
    page.locator("#security-group-create button[type=submit]").click()
    page.wait_for_url(re.compile(r"/security-groups/\d+/$"))
    page.select_option("#security-rule-form select[name=protocol]", "tcp")
    page.fill("#security-rule-form input[name=from_port]", "22")
    page.fill("#security-rule-form input[name=to_port]", "22")
    page.fill("#security-rule-form input[name=source]", "0.0.0.0/0")
    page.locator("#security-rule-form button[type=submit]").click()
    expect(page.locator("#security-group-rule-table tbody tr[id^=security-rule-]")).to_have_count(1)
    screenshot("security-group-ssh-only")

    page.goto(f"{live_server.url}/instances/{instance.pk}/")
    page.select_option("#security-group-form select[name=security_group]", label="ssh-only")
    page.locator("#security-group-form button[type=submit]").click()
    expect(page.locator("#instance-security-group-name")).to_have_text("ssh-only")
    wait_until(lambda: outside("curl", "-sf", "-m", "2", url).returncode != 0, seconds=10)
    assert ssh_answers(access, key).returncode == 0  # live: the host kept running


def journey(page: Page, live_server, screenshot, park, key: Path) -> str:
    """The tenant's part; returns the agent's id of the host and how it was reached."""
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="login"]', park.owner.email)
    page.fill('input[name="password"]', PASSWORD)
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

    # Order: the instance page comes back once the agent reports the host running.
    page.goto(f"{live_server.url}/instances/new/?flavor={park.flavor.code}")
    page.fill("#id_name", "agent-host")
    page.fill("#id_ssh_public_key", key.with_suffix(".pub").read_text().strip())
    started = time.monotonic()
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    instance = Instance.objects.get(name="agent-host")
    access = instance.access
    # The server's public address and a port of it, not an address inside the server.
    assert access["address"] == PUBLIC_ADDRESS and access["ssh_port"] >= 20000
    ssh_line = page.locator("#ssh-command").inner_text()
    assert ssh_line == f"ssh -p {access['ssh_port']} root@{PUBLIC_ADDRESS}"
    expect(page.locator("#disk-offline-note")).to_be_visible()

    # The line copied from the page, run on the tenant's laptop (the outside world).
    wait_until(lambda: outside_ssh(ssh_line, key).returncode == 0, seconds=10)
    print(f"order -> SSH-able from outside: {time.monotonic() - started:.2f} s")
    # The ordered card is bound in, and only it.
    devices = ssh_answers(access, key, "ls /dev/ | grep -E '^nvidia[0-9]+$'").stdout.split()
    assert devices == ["nvidia0"]
    # NVML in the host, the server's driver bound in, sees that card as card 0 and no other.
    nvidia_smi = key.parent / "server" / "driver" / "bin" / "nvidia-smi"  # start_agent_server's
    listed = ssh_answers(access, key, f"{nvidia_smi} -L")
    card = Accelerator.objects.get(allocation__workload__instance=instance)
    expected = rf"GPU 0: .* \(UUID: {card.agent_card.uuid}\)\n"
    assert re.fullmatch(expected, listed.stdout), listed.stdout + listed.stderr

    network_journey(page, live_server, screenshot, instance, access, key)

    # The card's live figures, measured by the agent (the fake NVML draws 231 W).
    expect(page.locator("#chart-gpu-power canvas")).to_have_count(1)
    telemetry = page.request.get(
        f"{live_server.url}{page.locator('#agent-host-charts').get_attribute('data-url')}"
    ).json()
    assert "231" in str(telemetry)
    screenshot("agent-host-running")

    # Stop: the card goes back to the pool for others; the host keeps its disk.
    page.locator("#instance-actions button", has_text="Stop").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "stopped")
    assert not Accelerator.objects.filter(allocation__workload__instance=instance).exists()
    assert ssh_answers(access, key).returncode != 0
    screenshot("agent-host-stopped")

    # Start again: a card again, SSH again.
    page.locator("#start-button").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    instance.refresh_from_db()
    assert instance.access == access  # the same port after a stop and a start
    wait_until(lambda: ssh_answers(instance.access, key).returncode == 0, seconds=10)

    # Resize to the family's two-card flavor: the host restarts with both cards bound in.
    larger = park.flavor.family.flavors.get(accelerator_count=2)
    page.select_option("#resize-form select[name=flavor]", larger.code)
    page.locator("#resize-form button[type=submit]").click()
    expect(page.locator("#instance-flavor")).to_contain_text(larger.code)
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    instance.refresh_from_db()
    assert instance.access == access
    wait_until(lambda: ssh_answers(access, key).returncode == 0, seconds=10)
    devices = ssh_answers(access, key, "ls /dev/ | grep -E '^nvidia[0-9]+$'").stdout.split()
    assert devices == ["nvidia0", "nvidia1"]
    screenshot("agent-host-resized")

    # Release: the host, its disk and its network are gone from the server.
    page.locator("#release-button").click()
    page.locator("#confirm-dialog-ok").click()  # the page's own dialog
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
    screenshot("agent-host-released")
    return instance.backend_handle, access
