"""The web terminal in Chromium, end to end: the portal served by Daphne (pages and WebSocket),
a member clicks 终端 on the host page and gets a root shell in a real sshd that trusts the
portal's CA (a throwaway one on this machine, as an agent host's sshd is once its spec's
`ssh_user_ca_keys` are applied), runs a command, resizes the window, closes the tab: the audit
log has the session. Another organization's owner gets a 404. And on a real host agent (marker
`containers`; run under `flock /tmp/agent-hosts.lock`): the terminal of a host ordered in the
browser is a shell in that host, its sshd trusting the CA its spec carries."""

import re
import subprocess
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from playwright.sync_api import Page, expect

from apps.agents import host_ca, terminal
from apps.core.models import AuditEvent
from apps.orchestration.models import Accelerator
from apps.orders.models import Instance, InstanceState
from tests.agent_server import build_agent_park, require_hosts, start_agent_server
from tests.asgi_server import daphne_portal, database_url
from tests.e2e.conftest import ARTIFACTS
from tests.factories import InstanceFactory, PoolFactory
from tests.throwaway_sshd import require_sshd, throwaway_sshd

# Daphne runs in a process of its own: it needs a database another process can open.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
TIMEOUT_MS = 20_000


@pytest.fixture
def sshd_allowed():
    require_sshd()


def sign_in(page: Page, url: str, user) -> None:
    client = Client()
    client.force_login(user)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": url}]
    )


def screen_text(page: Page) -> str:
    return page.locator(".xterm-rows").inner_text()


def stty_size(page: Page, marker: str) -> tuple[int, int]:
    """Rows and columns the shell's pty has, asked with a command the screen then shows."""
    page.keyboard.type(f"echo {marker}-$(stty size | tr ' ' x)\n")
    expect(page.locator(".xterm-rows")).to_contain_text(re.compile(rf"{marker}-\d+x\d+"))
    rows, cols = re.search(rf"{marker}-(\d+)x(\d+)", screen_text(page)).groups()
    return int(rows), int(cols)


def test_a_member_runs_a_command_in_the_browser_terminal(
    page: Page, request, organization, member, other_owner, screenshot, tmp_path, sshd_allowed
):
    ca_key = settings.LOAM_HOST_CA_KEY
    with (
        throwaway_sshd(tmp_path / "sshd", trusted_ca_keys=[host_ca.ca_public_key()]) as sshd,
        daphne_portal(
            database_url=database_url(connection.settings_dict),
            ca_key=ca_key,
            log=tmp_path / "daphne.log",
        ) as url,
    ):
        instance = InstanceFactory(
            organization=organization,
            pool=PoolFactory(backend__driver="agent", backend__park=organization.park),
            state=InstanceState.RUNNING,
            access=sshd.access(),
        )
        page.set_default_timeout(TIMEOUT_MS)
        sign_in(page, url, member)
        page.goto(f"{url}/instances/{instance.pk}/")
        screenshot("host-page")
        with page.context.expect_page() as opened:
            page.locator(f'[data-terminal="{instance.pk}"]').first.click()
        shell = opened.value
        shell.set_default_timeout(TIMEOUT_MS)
        expect(shell.locator(".xterm-rows")).to_contain_text("root@")
        shell.keyboard.type("echo hi-$((6*7))\n")
        expect(shell.locator(".xterm-rows")).to_contain_text("hi-42")
        before = stty_size(shell, "first")
        shell.set_viewport_size({"width": 640, "height": 360})
        # The fit addon resizes the terminal, which sends the new size to the pty.
        shell.wait_for_timeout(300)
        after = stty_size(shell, "second")
        assert after[0] < before[0] and after[1] < before[1], (before, after)
        shell.screenshot(path=ARTIFACTS / request.node.name / "02-terminal.png")
        shell.close()
        deadline = time.monotonic() + 15
        while not AuditEvent.objects.filter(action=terminal.CLOSED).exists():
            assert time.monotonic() < deadline, "the session's end was not audited"
            time.sleep(0.2)
        opened_event = AuditEvent.objects.get(action=terminal.OPENED)
        assert opened_event.actor == member and opened_event.object_id == str(instance.pk)
        assert opened_event.data == {"host": f"127.0.0.1:{sshd.port}"}

        page.context.clear_cookies()
        sign_in(page, url, other_owner)
        response = page.goto(f"{url}/instances/{instance.pk}/terminal/")
        assert response.status == 404


@pytest.mark.containers
def test_the_terminal_of_a_host_ordered_in_the_browser_is_a_shell_in_that_host(
    page: Page, live_server, settings, screenshot, tmp_path, outside_world
):
    """On a real host agent (tests/agent_server.py): a host ordered in the browser trusts the
    portal's CA from its spec, and the terminal opened from its page runs in it. The order goes
    through pytest-django's live server (Celery eager there); the terminal through Daphne on the
    same database, as production's nginx splits / and /ws/."""
    require_hosts()
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    park = build_agent_park(quota=1)
    server = start_agent_server(
        pool=park.pool,
        operator=park.operator,
        portal_url=live_server.url,
        work=tmp_path / "server",
        cards=1,
    )
    try:
        deadline = time.monotonic() + 30
        while not Accelerator.objects.filter(node__pool=park.pool).exists():
            assert time.monotonic() < deadline, "the agent's card never appeared"
            time.sleep(0.2)
        # The order's request waits while the agent creates the host (Celery eager).
        page.set_default_timeout(120_000)
        sign_in(page, live_server.url, park.owner)
        page.goto(f"{live_server.url}/instances/new/?flavor={park.flavor.code}")
        page.fill("#id_name", "terminal-host")
        # The order asks for a key to SSH in with; the terminal needs none.
        key = tmp_path / "tenant_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        page.fill("#id_ssh_public_key", key.with_suffix(".pub").read_text().strip())
        page.locator("#order-submit").click()
        page.wait_for_url(re.compile(r"/instances/\d+/$"))
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
        instance = Instance.objects.get(name="terminal-host")
        # The key its sshd presented to its agent: the only one the terminal accepts.
        kinds = {key.split()[0] for key in instance.access["ssh_host_keys"]}
        assert "ssh-ed25519" in kinds, instance.access
        with daphne_portal(
            database_url=database_url(connection.settings_dict),
            ca_key=settings.LOAM_HOST_CA_KEY,
            log=tmp_path / "daphne.log",
        ) as url:
            sign_in(page, url, park.owner)  # live_server's address is localhost, Daphne's 127.0.0.1
            page.goto(f"{url}/instances/{instance.pk}/")
            screenshot("agent-host-page")
            with page.context.expect_page() as opened:
                clicked = time.monotonic()
                page.locator(f'[data-terminal="{instance.pk}"]').first.click()
            shell = opened.value
            expect(shell.locator(".xterm-rows")).to_contain_text("root@", timeout=30_000)
            print(f"click -> prompt of the real host: {time.monotonic() - clicked:.2f} s")
            shell.keyboard.type("echo hi-$((6*7)) $(hostname)\n")
            expect(shell.locator(".xterm-rows")).to_contain_text("hi-42", timeout=30_000)
            shell.close()
        opened_event = AuditEvent.objects.get(action=terminal.OPENED)
        assert opened_event.actor == park.owner
        assert opened_event.data["host"] == (
            f"{instance.access['address']}:{instance.access['ssh_port']}"
        )
        page.goto(f"{live_server.url}/instances/{instance.pk}/")
        page.locator("#release-button").click()
        page.locator("#confirm-dialog-ok").click()
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
    finally:
        server.stop()
