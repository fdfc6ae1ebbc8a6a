"""The web terminal: seconds from a click on 终端 / Terminal to a usable shell, in Chromium.

    python bench/terminal_latency.py [--sessions 30]

Needs root and Debian's openssh-server (a throwaway sshd on 127.0.0.1 that trusts the portal's
host CA, as an agent host's sshd does once its spec's `ssh_user_ca_keys` are applied), and
Debian's Chromium. Builds a scratch SQLite database in a temporary folder (migrated, one
organization with a member and a running agent host whose SSH endpoint is that sshd), serves the
portal with Daphne (tests/asgi_server.py: pages and the WebSocket, one process), signs the member
in and, --sessions times: opens the host page, clicks Terminal and times, from the click, (1) the
shell's prompt on the screen (the socket upgraded, a certificate signed, SSH connected, a pty and
a login shell started) and (2) the answer to the first command typed (`echo ready-$((6*7))`),
then closes the tab (the session's end is audited). Prints p50/p95/max of both.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def summary(name: str, figures: list[float]) -> str:
    figures = sorted(figures)
    p95 = figures[max(0, round(0.95 * len(figures)) - 1)]
    return (
        f"{name:<34} p50 {statistics.median(figures) * 1000:6.0f} ms   "
        f"p95 {p95 * 1000:6.0f} ms   max {figures[-1] * 1000:6.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--timeout", type=float, default=20, help="per step (seconds)")
    args = parser.parse_args()

    from tests.throwaway_sshd import missing_for_sshd

    if missing := missing_for_sshd():
        sys.exit(f"bench/terminal_latency.py: {missing}")
    work = Path(tempfile.mkdtemp(prefix="loam-terminal-bench-"))
    database = f"sqlite:///{work / 'bench.sqlite3'}"
    ca_key = work / "host-ca" / "ssh_user_ca"
    os.environ.update(
        DATABASE_URL=database,
        LOAM_HOST_CA_KEY=str(ca_key),
        DJANGO_SETTINGS_MODULE="portal.settings",
        # Playwright's sync API runs an event loop in this thread; the ORM calls here are few.
        DJANGO_ALLOW_ASYNC_UNSAFE="true",
    )
    import django

    django.setup()
    from django.core.management import call_command

    print(f"migrating a scratch database in {work} ...", flush=True)
    call_command("migrate", verbosity=0)
    run(args, work=work, database=database, ca_key=ca_key)


def run(args, *, work: Path, database: str, ca_key: Path) -> None:
    from django.test import Client
    from playwright.sync_api import expect, sync_playwright

    from apps.agents import host_ca, terminal
    from apps.core.models import AuditEvent
    from apps.orders.models import InstanceState
    from tests.asgi_server import daphne_portal
    from tests.factories import (
        InstanceFactory,
        MembershipFactory,
        OrganizationFactory,
        PoolFactory,
        UserFactory,
    )
    from tests.throwaway_sshd import throwaway_sshd

    organization = OrganizationFactory()
    member = UserFactory()
    MembershipFactory(organization=organization, user=member, role="member")
    client = Client()
    client.force_login(member)
    session = client.cookies["sessionid"].value
    timeout_ms = args.timeout * 1000
    to_prompt, to_answer = [], []
    with (
        throwaway_sshd(work / "sshd", trusted_ca_keys=[host_ca.ca_public_key()]) as sshd,
        daphne_portal(database_url=database, ca_key=ca_key, log=work / "daphne.log") as url,
        sync_playwright() as playwright,
    ):
        instance = InstanceFactory(
            organization=organization,
            pool=PoolFactory(backend__driver="agent", backend__park=organization.park),
            state=InstanceState.RUNNING,
            access=sshd.access(),
        )
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context()
        context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
        page = context.new_page()
        page.set_default_timeout(timeout_ms)
        for number in range(1, args.sessions + 1):
            page.goto(f"{url}/instances/{instance.pk}/")
            button = page.locator(f'[data-terminal="{instance.pk}"]').first
            button.wait_for()
            with context.expect_page() as opened:
                start = time.perf_counter()
                button.click()
            shell = opened.value
            rows = shell.locator(".xterm-rows")
            expect(rows).to_contain_text("root@", timeout=timeout_ms)
            to_prompt.append(time.perf_counter() - start)
            shell.keyboard.type("echo ready-$((6*7))\n")
            expect(rows).to_contain_text("ready-42", timeout=timeout_ms)
            to_answer.append(time.perf_counter() - start)
            shell.close()
            print(
                f"session {number:3d}: prompt {to_prompt[-1] * 1000:5.0f} ms, "
                f"first answer {to_answer[-1] * 1000:5.0f} ms",
                flush=True,
            )
        browser.close()
        deadline = time.monotonic() + args.timeout
        while AuditEvent.objects.filter(action=terminal.CLOSED).count() < args.sessions:
            if time.monotonic() > deadline:
                sys.exit("bench/terminal_latency.py: not every session's end was audited")
            time.sleep(0.2)
    print()
    print(f"{args.sessions} sessions, Daphne on 127.0.0.1, sshd on 127.0.0.1:{sshd.port}")
    print(summary("click -> shell prompt", to_prompt))
    print(summary("click -> first command answered", to_answer))
    print(f"scratch folder (database, Daphne's log): {work}")


if __name__ == "__main__":
    main()
