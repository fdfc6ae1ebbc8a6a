"""The portal's agent API as a scripted HTTP server: it records each request and gives the
answers a test queued, or by default the documented success (docs/agent-protocol.md)."""

import hashlib
import json
import threading
from collections import defaultdict, deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

ENROLLED = (201, {"server_id": "srv-1", "credential": "s3cret-credential"})
HEARTBEAT_ACCEPTED = (204, None)


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: dict


class FakePortal:
    def __init__(self) -> None:
        self.url = ""
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._queued: dict[str, deque] = defaultdict(deque)
        # The desired hosts, once a test sets them; None: a portal without the hosts API (404).
        self.hosts: list[dict] | None = None
        # The saved images it keeps on the server (the hosts list's `saved_images`), if it says.
        self.saved_images: list[str] | None = None
        # The server's volumes listed with them; None: a portal that lists none.
        self.volumes: list[dict] | None = None
        # Saved images to send or fetch (the hosts list's `image_transfers`), if it says.
        self.image_transfers: list[dict] | None = None
        # Saved images' archives PUT to it, by path, which a GET of that path answers.
        self.archives: dict[str, bytes] = {}

    def answer(self, path: str, *answers: tuple) -> None:
        """Answer the next requests to `path` with these (status, JSON body[, headers]) in turn."""
        with self._lock:
            self._queued[path].extend(answers)

    def requests(self, path: str) -> list[Request]:
        with self._lock:
            return [request for request in self._requests if request.path == path]

    def handle(self, request: Request) -> tuple:
        with self._lock:
            self._requests.append(request)
            if self._queued[request.path]:
                return self._queued[request.path].popleft()
        if request.path == "/api/v1/agent/enrol":
            return ENROLLED
        if request.path == "/api/v1/agent/heartbeat":
            return HEARTBEAT_ACCEPTED
        if self.hosts is not None:
            return self._hosts_answer(request)
        return 404, {"detail": "not found"}

    def _hosts_answer(self, request: Request) -> tuple:
        if request.path == "/api/v1/agent/hosts/report":
            return HEARTBEAT_ACCEPTED
        if request.path == "/api/v1/agent/hosts":
            body = {"hosts": self.hosts}
            if self.saved_images is not None:
                body["saved_images"] = self.saved_images
            if self.volumes is not None:
                body["volumes"] = self.volumes
            if self.image_transfers is not None:
                body["image_transfers"] = self.image_transfers
            etag = '"' + hashlib.sha256(json.dumps(body).encode()).hexdigest()[:16] + '"'
            if request.headers.get("if-none-match") == etag:
                return 304, None, {"ETag": etag}
            return 200, body, {"ETag": etag}
        return 404, {"detail": "not found"}


def portal_handler(portal: FakePortal) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {name.lower(): value for name, value in self.headers.items()}
            status, answer, *extra_headers = portal.handle(
                Request(path=self.path, headers=headers, body=body)
            )
            payload = b"" if answer is None else json.dumps(answer).encode()
            self.send_response(status)
            for name, value in (extra_headers[0] if extra_headers else {}).items():
                self.send_header(name, value)
            if payload:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            archive = portal.archives.get(self.path)
            if archive is None:
                return self.do_POST()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-tar")
            self.send_header("Content-Length", str(len(archive)))
            self.end_headers()
            self.wfile.write(archive)

        def do_PUT(self) -> None:
            """An archive: kept as sent, the request recorded with its sha256 header."""
            archive = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            portal.archives[self.path] = archive
            headers = {name.lower(): value for name, value in self.headers.items()}
            portal.handle(Request(path=self.path, headers=headers, body={"size": len(archive)}))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format, *args) -> None:
            """Quiet: the tests assert on the recorded requests."""

    return Handler
