"""A partner's server joins the park as the pages tell it to, and a tenant's host runs on it.

The operator, in Chromium, adds a pool for agent servers (no JSON), issues a join token and
copies the one install command the page shows; the command runs on the partner's server, a
network namespace of its own (tests/partner_server.py) that reaches the portal and the outside
world as a server in another building would, as a partner runs it (curl of this portal's
/agent/install.sh, piped into bash): it installs the agent from the portal's archive into its own
venv and enrols the server, with its fake cards (tests/agent_server.py). The installed agent then
runs there, its uplink the partner's. The operator accepts the catalog the portal proposes for
the server, prices filled in; the tenant orders the proposed flavor in the browser, the host runs
on that server as a real container, and the tenant reaches it from the outside world with the
SSH line the portal gives (the partner's public address); the host reaches the outside world
from that address. Released, nothing of it is left there.

The installer writes under a folder of the test's (--root) with no Debian package installed
(LOAM_AGENT_SKIP_APT=1: deploy/agent/install.sh put them here) and its pip reads the agent's
wheels offline (tests/agent_wheels.py); the host image is the machine's cache.
"""

import os
import re
import subprocess
import time
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from apps.catalog.models import Flavor
from apps.orchestration.models import Accelerator, Allocation
from apps.orders.models import Instance
from apps.quotas.models import QuotaLimit
from tests.agent_server import (
    AgentServer,
    fake_cards,
    network_config,
    require_hosts,
    ssh_answers,
)
from tests.agent_wheels import offline_pip
from tests.factories import (
    AcceleratorModelFactory,
    MembershipFactory,
    OrganizationFactory,
    ParkOperatorFactory,
    RegionFactory,
    UserFactory,
)
from tests.outside_world import OUTSIDE_ADDRESS
from tests.partner_server import PARTNER_ADDRESS, PARTNER_UPLINK, in_partner, partner_server

pytestmark = [pytest.mark.containers, pytest.mark.postgres]
PASSWORD = "partner-journey-password-1"
TIMEOUT_MS = 30_000
CARDS = 2


@pytest.fixture
def can_run_hosts():
    require_hosts()


def wait_until(check, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def sign_in(page: Page, url: str, user) -> None:
    page.context.clear_cookies()
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": url}])
    page.goto(f"{url}/accounts/login/")
    page.fill('input[name="login"]', user.email)
    page.fill('input[name="password"]', PASSWORD)
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda address: "/accounts/login/" not in address)


def user_with_password():
    user = UserFactory()
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def partner(can_run_hosts, outside_world, live_server):
    """The partner's server: its own network namespace, the portal on its loopback."""
    with partner_server(urlsplit(live_server.url).port):
        yield


@pytest.mark.django_db(transaction=True)
def test_a_partner_server_joins_from_the_pages_and_a_tenants_host_runs_on_it(
    page: Page, live_server, settings, tmp_path, partner, outside_world, wheelhouse
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.LOAM_BASE_URL = live_server.url  # the address the install command names
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    # A park with a region and an accelerator model, and no flavor, image or pool of it yet.
    tenant = OrganizationFactory(verification_state="verified")
    park = tenant.park
    operator = user_with_password()
    ParkOperatorFactory(park=park, user=operator)
    owner = user_with_password()
    MembershipFactory(organization=tenant, user=owner, role="owner")
    region = RegionFactory(park=park, code="wuxi", name="Wuxi")
    model = AcceleratorModelFactory(slug="l40s", name="L40S")
    for resource in ("accelerators", "instances"):
        QuotaLimit.objects.create(park=park, organization=tenant, resource=resource, limit=2)

    # 1. The operator adds a pool for the partner's servers and issues a join token for it.
    sign_in(page, live_server.url, operator)
    page.goto(f"{live_server.url}/ops/agents/parks/{park.pk}/tokens/")
    page.fill("#agent-pool-form input[name=name]", "wuxi-l40s")
    page.select_option("#agent-pool-form select[name=region]", str(region.pk))
    page.select_option("#agent-pool-form select[name=accelerator_model]", str(model.pk))
    page.locator("#agent-pool-form button[type=submit]").click()
    expect(page.locator("#join-token-form select[name=pool]")).to_contain_text("wuxi-l40s")
    page.locator("#join-token-form button[type=submit]").click()
    command = page.locator("#install-command").inner_text().strip()
    prefix = f"curl -fsSL {live_server.url}/agent/install.sh | sudo bash -s -- "
    assert command.startswith(prefix), command

    # 2. On the partner's server, as root, the command from the page (sudo is who runs it here).
    root = tmp_path / "server"
    cards = fake_cards(tmp_path, CARDS)
    env = {**offline_pip(wheelhouse), **cards, "LOAM_AGENT_SKIP_APT": "1"}
    install = f"{command.replace('sudo ', '')} --root {root} --no-start --no-image"
    installed = subprocess.run(
        in_partner("bash", "-c", install),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    config = root / "etc/loam-agent/agent.toml"
    with config.open("a") as extra:
        extra.write(network_config(uplink=PARTNER_UPLINK, public_address=PARTNER_ADDRESS))
    log = tmp_path / "agent.log"
    process = subprocess.Popen(
        in_partner(root / "usr/local/bin/loam-agent", "--config", config, "run"),
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    server = AgentServer(process=process, state_dir=root / "var/lib/loam-agent", log=log)
    try:
        on_server = Accelerator.objects.filter(node__pool__name="wuxi-l40s")
        wait_until(lambda: on_server.count() == CARDS)
        # Enrolled and reporting from the partner's network, not this machine's.
        assert os.readlink(f"/proc/{process.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        node = on_server.first().node

        # 3. The operator accepts the catalog proposed for the server, prices filled in.
        page.goto(f"{live_server.url}/ops/agents/parks/{park.pk}/servers/")
        page.locator(".propose-catalog").first.click()
        prices = page.locator("#catalog-form input[name$='-price']")
        for index in range(prices.count()):
            prices.nth(index).fill(str(6 * (index + 1)))
        page.locator("#catalog-form button[type=submit]").click()
        on_sale = Flavor.objects.filter(family__park=park, family__accelerator_model=model)
        wait_until(lambda: on_sale.exists())
        page.wait_for_load_state()
        one_card = on_sale.get(accelerator_count=1)

        # 4. The tenant orders the proposed flavor; the host runs on the partner's server.
        sign_in(page, live_server.url, owner)
        key = tmp_path / "tenant_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        page.goto(f"{live_server.url}/instances/new/?flavor={one_card.code}")
        page.fill("#id_name", "on-partner")
        page.fill("#id_ssh_public_key", key.with_suffix(".pub").read_text().strip())
        page.locator("#order-submit").click()
        page.wait_for_url(re.compile(r"/instances/\d+/$"))
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
        instance = Instance.objects.get(name="on-partner")
        assert (
            Allocation.objects.get(workload__instance=instance, released_at__isnull=True).node
            == node
        )
        assert server.host_folders()  # a real container on the partner's server
        # Reached from the outside world at the partner's address, as the portal says, and
        # reaching it from there.
        assert instance.access["address"] == PARTNER_ADDRESS
        wait_until(lambda: ssh_answers(instance.access, key).returncode == 0)
        url = f"http://{OUTSIDE_ADDRESS}/hello.txt?from-partner"
        fetch = f"python3 -c \"import urllib.request; urllib.request.urlopen('{url}')\""
        assert ssh_answers(instance.access, key, fetch).returncode == 0
        assert PARTNER_ADDRESS in outside_world.http_clients()

        # 5. Released, nothing of the host is left on the server.
        page.locator("#release-button").click()
        page.locator("#confirm-dialog-ok").click()
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
        wait_until(lambda: not server.host_folders())
    finally:
        server.stop()
