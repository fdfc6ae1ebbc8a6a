"""The whole portal served by Daphne (portal/asgi.py: pages and the web terminal's WebSocket) in
a process of its own, on a database the caller names: pytest-django's live server speaks WSGI
only. Used by the web terminal's browser test and bench/terminal_latency.py."""

import os
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tests.throwaway_sshd import free_port

REPO = Path(__file__).resolve().parents[1]


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL for the database Django's connection `settings_dict` names."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or "postgres"
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


@contextmanager
def daphne_portal(*, database_url: str, ca_key: Path, log: Path, **env):
    """Yields the base URL of a Daphne serving the portal in DEBUG (static files from the
    source tree) on 127.0.0.1, signing terminal certificates with `ca_key`; stopped by its PID
    on leaving."""
    port = free_port()
    environment = {
        **os.environ,
        "DEBUG": "true",
        "DATABASE_URL": database_url,
        "LOAM_HOST_CA_KEY": str(ca_key),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        **env,
    }
    environment.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        server = subprocess.Popen(
            [REPO / ".venv/bin/daphne", "-b", "127.0.0.1", "-p", str(port)]
            + ["portal.asgi:application"],
            cwd=REPO,
            env=environment,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, log.read_text()
                try:
                    urllib.request.urlopen(f"{url}/accounts/login/", timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"Daphne did not answer: {log.read_text()}"
                    time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
