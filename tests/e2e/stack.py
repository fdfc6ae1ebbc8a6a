"""The production stack (deploy/stack/) as journeys reach it: its address and certificate, the
`stack` fixture, and signing in as the login form does.

The stack's address comes from the environment (LOAM_STACK_URL, LOAM_STACK_HTTP_URL,
LOAM_STACK_CA_FILE; .ci/run exports them) or else from the env file start.sh writes. Without a
running stack the journeys are skipped, except in CI (LOAM_REQUIRE_SERVICES=1), where they fail.
"""

import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ENV_FILE = Path(os.environ.get("LOAM_STACK_ROOT", REPO / "var" / "stack")) / "env"
KEYS = ("LOAM_STACK_URL", "LOAM_STACK_HTTP_URL", "LOAM_STACK_CA_FILE")


@dataclass(frozen=True)
class Stack:
    url: str  # https://127.0.0.1:8443
    root: Path  # its run dir (LOAM_STACK_ROOT): etc/loam.env is its processes' environment
    http_url: str  # http://127.0.0.1:8480, redirecting
    services_url: str  # https://127.0.0.1:8444: hosts' JupyterLab and TensorBoard
    tls: ssl.SSLContext  # trusts the stack's self-signed certificate, and only it
    ca_file: str  # that certificate
    metering_interval_s: int
    metrics_token: str
    demo: bool  # LOAM_STACK_DEMO=1: the demo park, its logins and the simulator
    operator_email: str
    operator_password: str

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.tls, timeout=15, **kwargs)


def _settings() -> dict[str, str]:
    settings = {}
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                settings[name.strip()] = value.strip()
    settings.update({k: v for k, v in os.environ.items() if k.startswith("LOAM_STACK_")})
    return settings


def _unavailable(reason: str):
    if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the production stack is required in CI: {reason}", pytrace=False)
    pytest.skip(f"needs the production stack (bash deploy/stack/start.sh): {reason}")


def find_stack() -> Stack:
    """The running stack, or the test is skipped (failed in CI) saying why."""
    settings = _settings()
    missing = [k for k in KEYS if not settings.get(k)]
    if missing:
        _unavailable(f"{', '.join(missing)} not set and no {ENV_FILE}")
    try:
        tls = ssl.create_default_context(cafile=settings["LOAM_STACK_CA_FILE"])
    except OSError as exc:
        _unavailable(f"cannot read its certificate: {exc}")
    found = Stack(
        url=settings["LOAM_STACK_URL"],
        root=ENV_FILE.parent,
        http_url=settings["LOAM_STACK_HTTP_URL"],
        services_url=settings.get("LOAM_STACK_SERVICES_URL", ""),
        tls=tls,
        ca_file=settings["LOAM_STACK_CA_FILE"],
        metering_interval_s=int(settings.get("LOAM_STACK_METERING_INTERVAL_S") or 60),
        metrics_token=settings.get("LOAM_STACK_METRICS_TOKEN", ""),
        demo=settings.get("LOAM_STACK_DEMO") == "true",
        operator_email=settings.get("LOAM_STACK_OPERATOR_EMAIL", ""),
        operator_password=Path(settings.get("LOAM_STACK_OPERATOR_PASSWORD_FILE", "/dev/null"))
        .read_text()
        .strip(),
    )
    with found.client() as client:
        try:
            health = client.get("/healthz")
        except httpx.HTTPError as exc:
            _unavailable(f"{found.url} does not answer: {exc}")
    if health.status_code != 200:
        _unavailable(f"{found.url}/healthz answers {health.status_code}: {health.text}")
    return found


def sign_in(client: httpx.Client, email: str, password: str) -> httpx.Response:
    """Signs in as the login form does; the answer is the page it lands on."""
    form = client.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)[1]
    return client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token, "login": email, "password": password},
        headers={"Referer": f"{client.base_url}/accounts/login/"},
        follow_redirects=True,
    )
