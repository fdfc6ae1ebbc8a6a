"""The production stack of deploy/stack/start.sh, from the outside: nginx over HTTPS in front of
gunicorn, a Celery worker and beat, DEBUG=false, on PostgreSQL, RabbitMQ and Redis.

A tenant orders a GPU host in Chromium, sees it running (the real worker and the simulator
backend), sees it billed (beat meters usage) and releases it; plain HTTPS requests check what
nginx adds: static files with a long cache, the redirect to HTTPS, the branded 404, security
headers sent once, /metrics refused to any address but loopback, and the web terminal's
WebSocket upgraded through to Daphne. The first operator, made
by `create_operator` as a production site makes one, signs in with the password chosen for them;
without LOAM_STACK_DEMO=1 the stack is production's and holds no demo login (.ci/run starts it
both ways).

Where the stack is found, and why these tests fail rather than skip in CI: tests/e2e/stack.py.
"""

import base64
import json
import re
import struct
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from apps.operations import demo
from tests.e2e.stack import Stack, sign_in

pytestmark = pytest.mark.stack

FLAVOR = "a100.1x"  # ¥18 an hour: a few seconds of it already cost whole fen
SSH_KEY = (
    "ssh-ed25519 "
    + base64.b64encode(
        struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + bytes(range(32))
    ).decode()
    + " stack@ci"
)
YEAR_S = 31_536_000


# --- The first operator, and no demo in production ------------------------------------------------


def test_the_first_operator_signs_in_with_the_password_chosen_for_them(stack):
    with stack.client() as client:
        refused = sign_in(client, stack.operator_email, stack.operator_password + "x")
        assert "/accounts/login/" in str(refused.url)
        landed = sign_in(client, stack.operator_email, stack.operator_password)
        console = client.get("/ops/")

    assert "/accounts/login/" not in str(landed.url)
    assert console.status_code == 200
    assert stack.operator_email in console.text


def test_a_production_stack_holds_no_demo_login(stack):
    if stack.demo:
        pytest.skip("this stack runs the demo park (LOAM_STACK_DEMO=1)")
    with stack.client() as client:
        for login in (demo.OWNER, demo.OPERATOR):
            answer = sign_in(client, login["email"], login["password"])
            assert "/accounts/login/" in str(answer.url), login["email"]


# --- What nginx adds ---------------------------------------------------------------------------


def test_static_files_are_nginx_s_with_hashed_names_and_a_year_of_cache(stack):
    with stack.client() as client:
        page = client.get("/catalog/")
        assert page.status_code == 200
        [stylesheet] = re.findall(r'href="(/static/css/loam\.[0-9a-f]{12}\.css)"', page.text)
        static = client.get(stylesheet, headers={"Accept-Encoding": "gzip"})
        unhashed = client.get("/static/css/loam.css")

    assert static.status_code == 200
    assert static.headers["server"] == "nginx"
    assert static.headers["cache-control"] == f"public, max-age={YEAR_S}, immutable"
    assert static.headers["content-encoding"] == "gzip"  # collectstatic's .gz, as it is
    assert static.headers["x-content-type-options"] == "nosniff"
    # Django never saw it: its middleware would have added a Content-Security-Policy.
    assert "content-security-policy" not in static.headers
    assert unhashed.headers["cache-control"] == "public, max-age=3600"


def test_http_redirects_to_https(stack):
    with httpx.Client(timeout=15) as client:
        response = client.get(f"{stack.http_url}/catalog/?vendor=nvidia")
    assert response.status_code == 301
    assert response.headers["location"] == f"{stack.url}/catalog/?vendor=nvidia"


def test_an_unknown_page_is_the_branded_404_not_a_debug_page(stack):
    with stack.client() as client:
        response = client.get("/no-such-page/", headers={"Accept-Language": "en"})
    assert response.status_code == 404
    assert 'class="navbar' in response.text
    assert "Page not found" in response.text
    assert "URLconf" not in response.text  # Django's DEBUG page lists the URL patterns tried


def test_security_headers_are_sent_once_and_by_django(stack):
    with stack.client() as client:
        response = client.get("/catalog/")
    for name in (
        "strict-transport-security",
        "content-security-policy",
        "x-frame-options",
        "x-content-type-options",
        "referrer-policy",
    ):
        assert len(response.headers.get_list(name)) == 1, name
    assert response.headers["strict-transport-security"].startswith("max-age=")
    assert "Secure" in response.headers["set-cookie"]


def test_metrics_are_refused_to_any_address_but_loopback(stack):
    # nginx allows 127.0.0.1 and ::1 only; 127.0.0.2 stands in for another machine (it is the
    # one other source address every Linux host can send from).
    token = {"Authorization": f"Bearer {stack.metrics_token}"}
    outside = httpx.HTTPTransport(verify=stack.tls, local_address="127.0.0.2")
    with stack.client(transport=outside) as client:
        refused = client.get("/metrics", headers=token)
    with stack.client() as client:
        scraped = client.get("/metrics", headers=token)
    assert refused.status_code == 403
    assert refused.headers["server"] == "nginx"
    # From loopback nginx passes it on, and Django answers the scraper's token with every
    # gunicorn worker's figures (the multiprocess directory deploy/gunicorn.conf.py manages).
    assert scraped.status_code == 200, scraped.text[:200]
    assert scraped.headers["content-type"].startswith("text/plain")
    assert "# HELP" in scraped.text


# --- A tenant's journey through nginx ------------------------------------------------------------


CLOSE_CODE_JS = """
(path) => new Promise((resolve) => {
  const socket = new WebSocket(`wss://${location.host}${path}`);
  socket.addEventListener("close", (event) => resolve(event.code));
})
"""


def test_the_web_terminal_s_socket_goes_through_nginx_to_daphne_with_the_session(page: Page, stack):
    """nginx upgrades /ws/ to Daphne, which reads the browser's session: a visitor's socket is
    closed as not signed in (4401), a signed-in user's on a host that is not theirs as not found
    (4404), never refused by nginx or the origin check."""
    socket = "/ws/instances/999999999/terminal/"
    page.goto(f"{stack.url}/accounts/login/")
    assert page.evaluate(CLOSE_CODE_JS, socket) == 4401
    page.fill('input[name="login"]', stack.operator_email)
    page.fill('input[name="password"]', stack.operator_password)
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    assert page.evaluate(CLOSE_CODE_JS, socket) == 4404


def usage_of(page: Page, stack: Stack, flavor: str) -> int:
    """What /billing/ shows as used by `flavor` hosts in the last 30 days, in fen."""
    page.goto(f"{stack.url}/billing/?group=flavor")
    data = page.locator("#usage-data")
    if data.count() == 0:  # the chart is left out until something was used
        return 0
    series = json.loads(data.text_content())["series"]
    return sum(sum(s["data"]) for s in series if s["name"] == flavor)


def test_a_tenant_orders_a_host_sees_it_running_and_billed_and_releases_it(page: Page, stack):
    if not stack.demo:
        pytest.skip("the tenant's journey orders a simulated host: LOAM_STACK_DEMO=1")
    timeout_ms = 60_000  # a real worker, the simulator's 1–3 s calls, a busy machine
    expect.set_options(timeout=timeout_ms)
    page.set_default_timeout(timeout_ms)
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": stack.url}])
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    # A Content-Security-Policy violation or a missing static file is a console error.
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))

    # 1. Sign in as the demo enterprise's owner.
    page.goto(f"{stack.url}/accounts/login/")
    page.fill('input[name="login"]', demo.OWNER["email"])
    page.fill('input[name="password"]', demo.OWNER["password"])
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    expect(page.locator("#nav-account")).to_have_text(demo.OWNER["email"])
    used_before = usage_of(page, stack, FLAVOR)

    # 2. Order a GPU host.
    name = f"stack-{int(time.time())}"
    page.goto(f"{stack.url}/instances/new/?flavor={FLAVOR}")
    page.fill("#id_name", name)
    page.fill("#id_ssh_public_key", SSH_KEY)
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    instance_url = page.url
    instance_id = int(re.search(r"/instances/(\d+)/$", instance_url).group(1))
    expect(page.locator("h1")).to_contain_text(name)
    try:
        # 3. Running: the worker took the job from RabbitMQ and the simulator answered.
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
        expect(page.locator("#ssh-command")).to_contain_text("ssh -p ")

        # 4. Billed: beat meters every LOAM_STACK_METERING_INTERVAL_S seconds. This host's own
        # usage records (the API, with the browser's session), then the billing page.
        deadline = time.monotonic() + max(60, 6 * stack.metering_interval_s)
        while not (charged := charged_for(page, stack, instance_id)):
            assert time.monotonic() < deadline, "no usage was metered for the running host"
            time.sleep(1)
        assert usage_of(page, stack, FLAVOR) >= used_before + charged
        expect(page.locator("#ledger tbody tr").first).to_contain_text("Usage charge")

        # 5. Release it.
        page.goto(instance_url)
        page.locator("#release-button").click()
        page.locator("#confirm-dialog-ok").click()  # the page's own dialog
        expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
        expect(page.locator("#ssh-command")).to_have_count(0)
    finally:
        release_if_held(page, stack, instance_id)
    assert problems == []


def charged_for(page: Page, stack: Stack, instance_id: int) -> int:
    """What the host's usage records add up to so far, in fen."""
    response = page.request.get(f"{stack.url}/api/v1/usage/?instance={instance_id}&page_size=200")
    assert response.ok, response.text()
    return sum(record["amount_minor"] for record in response.json()["results"])


def release_if_held(page: Page, stack: Stack, instance_id: int) -> None:
    """A journey that failed half-way must not leave its host running: on the stack's lasting
    database it would hold quota and drain the demo wallet for every later run."""
    instance = page.request.get(f"{stack.url}/api/v1/instances/{instance_id}/").json()
    if instance.get("state") in ("released", "releasing", None):
        return
    [csrf] = [c["value"] for c in page.context.cookies(stack.url) if c["name"] == "csrftoken"]
    page.request.post(
        f"{stack.url}/api/v1/instances/{instance_id}/release/",
        headers={"X-CSRFToken": csrf, "Referer": f"{stack.url}/"},
    )
