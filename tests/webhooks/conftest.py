"""A real HTTP receiver on 127.0.0.1 for the delivery tests, and webhook settings for tests."""

import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import translation

from apps.webhooks.services import verify_signature


@pytest.fixture(autouse=True)
def _webhook_settings(settings):
    settings.LOAM_WEBHOOKS_ALLOW_HTTP = True  # the receiver below speaks plain HTTP
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = True  # ... on 127.0.0.1
    settings.LOAM_WEBHOOK_BACKOFF_BASE_S = 0  # eager mode ignores countdowns anyway
    settings.LOAM_WEBHOOK_MAX_ATTEMPTS = 6


@pytest.fixture(autouse=True)
def _english():
    """Messages are asserted in English (the default language is zh-hans); the API tests send
    Accept-Language: en for the same reason."""
    with translation.override("en"):
        yield


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    verified: bool


@dataclass
class Receiver:
    """Answers each POST with the next status of `statuses` (the last one repeats) and checks
    its signature with `verify_signature` against `secret`, as a partner's receiver would.
    `reply` is the body of every answer (by default "ok", or "receiver is down" for a failure),
    `reply_headers` extra headers; over TLS, `server_names` holds each handshake's SNI."""

    url: str
    port: int
    statuses: list[int] = field(default_factory=lambda: [200])
    secret: str = ""
    reply: bytes | None = None
    reply_headers: dict = field(default_factory=dict)
    requests: list[Received] = field(default_factory=list)
    server_names: list[str] = field(default_factory=list)

    def answer(self) -> int:
        index = min(len(self.requests), len(self.statuses) - 1)
        return self.statuses[index]


@pytest.fixture
def start_receiver():
    """start_receiver(tls=None) -> a Receiver on 127.0.0.1, over TLS when given a server-side
    SSLContext; stopped after the test."""
    running = []

    def start(tls: ssl.SSLContext | None = None) -> Receiver:
        state = {}

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                target = state["receiver"]
                status = target.answer()
                verified = verify_signature(target.secret, self.headers.get("Loam-Signature"), body)
                target.requests.append(
                    Received(self.path, dict(self.headers.items()), body, verified)
                )
                reply = target.reply
                if reply is None:
                    reply = b"ok" if status < 300 else b"receiver is down"
                self.send_response(status)
                for name, value in target.reply_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        host, port = server.server_address[:2]
        scheme = "http"
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _context: state["receiver"].server_names.append(
                name
            )
            server.socket = tls.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        state["receiver"] = Receiver(url=f"{scheme}://{host}:{port}/hooks", port=port)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        running.append((server, thread))
        return state["receiver"]

    yield start
    for server, thread in running:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def receiver(start_receiver):
    return start_receiver()


@pytest.fixture
def fake_dns(monkeypatch):
    """fake_dns(name, [addresses], [addresses], ...): each lookup of `name` answers the next list
    of addresses (the last one repeats), as a name under the tenant's control may; other names
    and literals are resolved as usual. Returns the list of answers given, one per lookup."""
    real_getaddrinfo = socket.getaddrinfo

    def install(name: str, *answers: list[str]) -> list[list[str]]:
        given = []

        def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
            if host != name:
                return real_getaddrinfo(host, port, family, type, proto, flags)
            answer = answers[min(len(given), len(answers) - 1)]
            given.append(answer)
            return [
                (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))
                for address in answer
            ]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        return given

    return install
