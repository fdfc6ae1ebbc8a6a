"""The browser workbench of a real `pytorch` host: seconds from a click to a usable web terminal
and to a usable JupyterLab notebook, behind the production stack.

    python bench/workbench.py [--sessions 20]

Needs root, systemd-nspawn, the `pytorch` image (`loam-agent image build --name pytorch`,
LOAM_AGENT_IMAGE_DIR as for the tests), Debian's Chromium and a running production stack
(`bash deploy/stack/start.sh`; its LOAM_STACK_* settings in the environment, as for the tests).
Don't run it beside CI or the real-host tests: it starts the outside world (tests/outside_world.py)
and an agent server, whose network names those share.

As the workbench journey (tests/e2e/test_workbench_journey.py) does: builds an agent park in the
stack's own database, enrols a real `loam-agent` with the stack over HTTPS, signs its tenant in
(Chromium, in Chinese) and orders a `pytorch` host. Then, --sessions times, times from the click:
(1) 终端 → root's prompt in the web terminal (a socket through nginx to Daphne, a certificate
signed, SSH into the host, a login shell); (2) JupyterLab → a new notebook's kernel idle (nginx's
auth_request to the portal, the host's JupyterLab on the services' origin, a kernel started and
its WebSocket up); each tab is closed, and JupyterLab's kernels and layout forgotten
(tests/e2e/workbench.close_lab), before the next. Prints p50/p95/max of both and releases the
host.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.terminal_latency import summary  # noqa: E402
from tests.agent_server import missing_for_hosts, run_agent_server  # noqa: E402
from tests.e2e.stack import find_stack  # noqa: E402
from tests.e2e.stack_world import build_in_stack  # noqa: E402
from tests.e2e.workbench import (  # noqa: E402
    close_lab,
    open_notebook,
    open_terminal,
    order_host,
    release,
    sign_in,
)
from tests.outside_world import OutsideWorld, missing_tools  # noqa: E402

IMAGE = "pytorch"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    if missing := missing_for_hosts(IMAGE) or missing_tools():
        sys.exit(missing)
    stack = find_stack()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="bench-workbench-") as scratch:
        world = OutsideWorld(Path(scratch) / "outside").start()
        park = build_in_stack(stack.root, IMAGE)
        server = run_agent_server(
            join_token=park["join_token"],
            portal_url=stack.url,
            work=Path(scratch) / "server",
            cards=2,
            ca_bundle=stack.ca_file,
        )
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
                )
                page = browser.new_context(ignore_https_errors=True).new_page()
                sign_in(page, stack, park["owner"], park["password"])
                instance_url = order_host(page, stack, park["flavor"], IMAGE)
                terminal, notebook = measure(page, instance_url, args.sessions)
                release(page, instance_url)
                browser.close()
        except BaseException:
            print(server.log.read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            server.stop()
            world.stop()
    print(f"{args.sessions} sessions of one pytorch host behind {stack.url}")
    print(summary("click -> terminal prompt", terminal))
    print(summary("click -> notebook kernel idle", notebook))


def measure(page, instance_url: str, sessions: int) -> tuple[list[float], list[float]]:
    terminal, notebook = [], []
    for session in range(1, sessions + 1):
        shell, seconds = open_terminal(page, instance_url)
        terminal.append(seconds)
        shell.close()
        lab, seconds = open_notebook(page, instance_url)
        notebook.append(seconds)
        close_lab(lab)
        print(f"session {session}: terminal {terminal[-1]:.2f} s, notebook {seconds:.2f} s")
        time.sleep(0.5)  # the closed terminal's session ends (audited) before the next opens
    return terminal, notebook


if __name__ == "__main__":
    main()
