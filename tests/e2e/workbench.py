"""A tenant's steps in the browser workbench on the production stack, for the workbench journey
(tests/e2e/test_workbench_journey.py) and its bench (bench/workbench.py): sign in, order a host
of an image, open its web terminal and its JupyterLab, release it. Each opening step returns the
new tab and the seconds from the click to the tool being usable."""

from __future__ import annotations

import time

from playwright.sync_api import Page, expect

TIMEOUT_MS = 90_000  # a real worker, an agent, a host that starts JupyterLab, a busy machine


def sign_in(page: Page, stack, email: str, password: str) -> None:
    """Signs in through the login form, in Chinese."""
    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.context.add_cookies([{"name": "django_language", "value": "zh-hans", "url": stack.url}])
    page.goto(f"{stack.url}/accounts/login/")
    page.fill('input[name="login"]', email)
    page.fill('input[name="password"]', password)
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)


def order_host(page: Page, stack, flavor: str, image: str) -> str:
    """Orders a host of `flavor` and `image` and waits until it runs; returns its page's URL."""
    # Offered once the server's agent has enrolled and reported the image built (heartbeats).
    offered = page.locator(f"#id_image option[value='{image}']")
    deadline = time.monotonic() + 60
    while not (page.goto(f"{stack.url}/instances/new/?flavor={flavor}") and offered.count()):
        assert time.monotonic() < deadline, f"the {image} image was never offered"
        time.sleep(1)
    page.fill("#id_name", "workbench")
    # No SSH key: every pool selling the flavor is an agent pool, whose hosts the web terminal
    # logs in to by itself.
    page.select_option("#id_image", image)
    page.locator("#order-submit").click()
    refused = page.locator(".invalid-feedback, .alert-danger")
    page.wait_for_function(
        "() => /\\/instances\\/\\d+\\/$/.test(location.pathname)"
        " || document.querySelector('.invalid-feedback, .alert-danger')"
    )
    assert not refused.count(), refused.all_inner_texts()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "running")
    return page.url


def open_terminal(page: Page, instance_url: str) -> tuple[Page, float]:
    """Clicks 终端 on the host's page: usable once root's prompt is on the screen."""
    page.goto(instance_url)
    clicked = time.monotonic()
    with page.context.expect_page() as opened:
        page.locator("[data-terminal]").first.click()
    shell = opened.value
    shell.set_default_timeout(TIMEOUT_MS)
    expect(shell.locator(".xterm-rows")).to_contain_text("root@")
    return shell, time.monotonic() - clicked


def open_notebook(page: Page, instance_url: str) -> tuple[Page, float]:
    """Clicks JupyterLab on the host's page and a new notebook in its launcher: usable once the
    notebook's kernel (its WebSocket through nginx) says it is idle."""
    page.goto(instance_url)
    clicked = time.monotonic()
    with page.context.expect_page() as opened:
        page.locator("#open-jupyter").click()
    lab = opened.value
    lab.set_default_timeout(TIMEOUT_MS)
    lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
    expect(lab.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
    return lab, time.monotonic() - clicked


def close_lab(lab: Page) -> None:
    """Closes the JupyterLab tab and forgets what it left through JupyterLab's REST API (nginx
    adds the host's token; the member's cookies go with the request): its kernels are shut
    down, as Kernel › Shut Down All Kernels does, and its layout (the workspace, which would
    reopen the notebook in place of the launcher) is deleted. Sessions opened one after
    another then each start as a first one, with no kernels piling up in the host."""
    base = lab.url.split("/lab", 1)[0]
    request = lab.context.request
    lab.close()
    kernels = request.get(f"{base}/api/kernels")
    assert kernels.ok, (base, kernels.status)
    for kernel in kernels.json():
        assert request.delete(f"{base}/api/kernels/{kernel['id']}").ok, kernel
    workspace = request.delete(f"{base}/lab/api/workspaces/default")
    assert workspace.ok or workspace.status == 404, workspace.status


def release(page: Page, instance_url: str) -> None:
    page.goto(instance_url)
    page.locator("#release-button").click()
    page.locator("#confirm-dialog-ok").click()
    expect(page.locator(".state-badge").first).to_have_attribute("data-state", "released")
