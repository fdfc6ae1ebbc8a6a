"""A real HTTP receiver on 127.0.0.1 for the delivery tests, and webhook settings for tests."""

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import translation

from apps.webhooks.services import verify_signature


@pytest.fixture(autouse=True)
def _webhook_settings(settings, monkeypatch):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = True  # the receiver below speaks plain HTTP
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = True  # ... on 127.0.0.1
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 0  # eager mode ignores countdowns anyway
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 6
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(autouse=True)
def _english():
    """Messages are asserted in English (the default language is zh-hans); the API tests send
    Accept-Language: en for the same reason."""
    with translation.override("en"):
        yield


@dataclass
class Received:
    headers: dict
    body: bytes
    verified: bool


@dataclass
class Receiver:
    """Answers each POST with the next status of `statuses` (the last one repeats) and checks
    its signature with `verify_signature` against `secret`, as a partner's receiver would."""

    url: str
    statuses: list[int] = field(default_factory=lambda: [200])
    secret: str = ""
    requests: list[Received] = field(default_factory=list)

    def answer(self) -> int:
        index = min(len(self.requests), len(self.statuses) - 1)
        return self.statuses[index]


@pytest.fixture
def receiver():
    state = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            target = state["receiver"]
            status = target.answer()
            verified = verify_signature(target.secret, self.headers.get("Loam-Signature"), body)
            target.requests.append(Received(dict(self.headers.items()), body, verified))
            reply = b"ok" if status < 300 else b"receiver is down"
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host, port = server.server_address[:2]
    state["receiver"] = Receiver(url=f"http://{host}:{port}/hooks")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state["receiver"]
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
