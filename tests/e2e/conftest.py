"""Browser tests: Playwright drives Debian's Chromium against pytest-django's live server."""

import os
from pathlib import Path

import pytest

from tests.slurm import slurm_cluster  # noqa: F401  (fixture)

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make
# there (factories, assertions) are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": "/usr/bin/chromium",
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    }


@pytest.fixture
def screenshot(page, request):
    """screenshot("step") saves test-artifacts/screenshots/<test>/<n>-step.png."""
    folder = ARTIFACTS / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1, 100))

    def take(step: str) -> Path:
        path = folder / f"{next(counter):02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture(scope="module")
def stack():
    """The production stack (tests/e2e/stack.py); skipped without one, failed in CI."""
    from tests.e2e.stack import find_stack

    return find_stack()


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    # Chromium cannot be handed the stack's own CA; the stack's HTTPS checks verify it instead
    # (Stack.tls). Pages of the live server are plain HTTP and unaffected.
    return {**browser_context_args, "ignore_https_errors": True}
