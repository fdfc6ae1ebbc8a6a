"""The browser workbench on the production stack: a tenant orders a `pytorch` host, opens its web
terminal and imports torch there, opens JupyterLab and runs a cell; a member of another
organization gets 404 on both.

Everything is the real thing: nginx over HTTPS in front of gunicorn and the ASGI server (the
terminal's WebSocket), nginx's auth_request in front of the host's JupyterLab, the stack's Celery
worker provisioning through a real `loam-agent` enrolled with the stack, and a systemd-nspawn host
of the `pytorch` image behind the server's public address (tests/outside_world.py). The park is
built in the stack's own database (tests/e2e/stack_world.py).
"""

import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.agent_server import missing_for_hosts, run_agent_server
from tests.e2e.stack import sign_in
from tests.e2e.stack_world import build_in_stack

pytestmark = [pytest.mark.stack, pytest.mark.containers]
IMAGE = "pytorch"
TIMEOUT_MS = 90_000  # a real worker, an agent, a host that starts JupyterLab, a busy machine


@pytest.fixture
def can_run_hosts():
    if missing := missing_for_hosts(IMAGE):
        pytest.skip(missing)


def test_a_tenant_works_in_the_browser_terminal_and_jupyterlab(
    page: Page, stack, tmp_path, can_run_hosts, outside_world, screenshot
):
    world = build_in_stack(stack.root, IMAGE)
    server = run_agent_server(
        join_token=world["join_token"],
        portal_url=stack.url,
        work=tmp_path / "server",
        cards=2,
        ca_bundle=stack.ca_file,
    )
    try:
        instance_url = order_host(page, stack, world)
        terminal_journey(page, instance_url, screenshot)
        jupyter_journey(page, instance_url, screenshot)
        others_get_404(stack, world, instance_url)
        release(page, instance_url)
    finally:
        server.stop()
        print(server.log.read_text()[-3000:])


def order_host(page: Page, stack, world: dict) -> str:
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": stack.url}])
    page.goto(f"{stack.url}/accounts/login/")
    page.fill('input[name="login"]', world["owner"])
    page.fill('input[name="password"]', world["password"])
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

    page.goto(f"{stack.url}/instances/new/?flavor={world['flavor']}")
    page.fill("#id_name", "workbench")
    page.select_option("#id_image", str(world["image_id"]))
    page.locator("#order-submit").click()
    page.wait_for_url(re.compile(r"/instances/\d+/$"))
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    return page.url


def terminal_journey(page: Page, instance_url: str, screenshot) -> None:
    clicked = time.monotonic()
    page.goto(instance_url)
    page.locator("#terminal-button").click()
    page.wait_for_url(re.compile(r"/instances/\d+/terminal/$"))
    screen = page.locator(".xterm-rows")
    expect(screen).to_contain_text("#")  # root's prompt: the shell is usable
    print(f"click -> usable terminal: {time.monotonic() - clicked:.2f} s")
    page.locator(".xterm-helper-textarea").focus()
    page.keyboard.type("python -c \"import torch; print('torch', torch.__version__)\"\n")
    expect(screen).to_contain_text("torch 2.13.0")
    # The host's cards, and only them, through the server's driver bound in (fake NVML here).
    page.keyboard.type("nvidia-smi -L | wc -l\n")
    expect(screen).to_contain_text("\n1\n".strip())
    screenshot("workbench-terminal")


def jupyter_journey(page: Page, instance_url: str, screenshot) -> None:
    page.goto(instance_url)
    clicked = time.monotonic()
    with page.context.expect_page() as opened:
        page.locator("#jupyter-button").click()
    lab = opened.value
    lab.set_default_timeout(TIMEOUT_MS)
    lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
    cell = lab.locator(".jp-Cell .cm-content").first
    expect(cell).to_be_visible()
    print(f"click -> usable JupyterLab: {time.monotonic() - clicked:.2f} s")
    cell.click()
    lab.keyboard.type("print(6 * 7)")
    lab.keyboard.press("Shift+Enter")
    expect(lab.locator(".jp-OutputArea-output").first).to_contain_text("42")
    screenshot("workbench-jupyterlab")
    lab.close()


def others_get_404(stack, world: dict, instance_url: str) -> None:
    with stack.client() as client:
        assert sign_in(client, world["outsider"], world["password"]).status_code == 200
        for path in ("terminal/", "jupyter/lab"):
            answer = client.get(f"{instance_url}{path}")
            assert answer.status_code == 404, (path, answer.status_code)
    with httpx.Client(verify=stack.tls, timeout=15) as anonymous:
        answer = anonymous.get(f"{instance_url}jupyter/lab")
        assert answer.status_code in (302, 401, 404)


def release(page: Page, instance_url: str) -> None:
    page.goto(instance_url)
    page.locator("#release-button").click()
    page.locator("#confirm-dialog-ok").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
