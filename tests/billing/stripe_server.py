"""A stand-in for the Stripe API on 127.0.0.1, for the top-up tests.

It answers `POST /v1/checkout/sessions` (form-encoded, as the Stripe library sends it) with a
checkout.session object, replays the same session for a repeated Idempotency-Key (as Stripe
does), and records every request. `fail_next(status, ...)` makes the next requests answer with a
Stripe error object instead.
"""

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl


@dataclass
class StripeRequest:
    method: str
    path: str
    headers: dict
    params: dict  # "line_items[0][price_data][unit_amount]" -> "12345", as sent

    @property
    def idempotency_key(self) -> str:
        return self.headers.get("idempotency-key", "")


@dataclass
class FakeStripe:
    host: str = "127.0.0.1"
    port: int = 0
    requests: list[StripeRequest] = field(default_factory=list)
    sessions: dict = field(default_factory=dict)  # id -> the session object
    _errors: deque = field(default_factory=deque)
    _by_key: dict = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def fail_next(
        self, status: int, *, message: str = "Your request was invalid.", times=1, retry=False
    ):
        """The next `times` requests answer `status` with a Stripe error body. `retry` is the
        Stripe-Should-Retry header sent with it (None: none, so the library decides)."""
        kind = "invalid_request_error" if status < 500 else "api_error"
        headers = {} if retry is None else {"Stripe-Should-Retry": str(retry).lower()}
        for _ in range(times):
            self._errors.append((status, {"error": {"type": kind, "message": message}}, headers))

    def session_requests(self) -> list[StripeRequest]:
        return [r for r in self.requests if r.path == "/v1/checkout/sessions"]

    # --- what the handler calls --------------------------------------------------------------

    def answer(self, request: StripeRequest) -> tuple[int, dict, dict]:
        with self._lock:
            self.requests.append(request)
            if self._errors:
                return self._errors.popleft()
            if request.method != "POST" or request.path != "/v1/checkout/sessions":
                error = {"type": "invalid_request_error", "message": "Unrecognized request URL"}
                return 404, {"error": error}, {}
            key = request.idempotency_key
            if key and key in self._by_key:
                return 200, self.sessions[self._by_key[key]], {"Idempotent-Replayed": "true"}
            session = self._session(request.params)
            self.sessions[session["id"]] = session
            if key:
                self._by_key[key] = session["id"]
            return 200, session, {}

    def _session(self, params: dict) -> dict:
        number = next(self._ids)
        session_id = f"cs_test_fake{number:04d}"
        unit = int(params.get("line_items[0][price_data][unit_amount]", "0"))
        quantity = int(params.get("line_items[0][quantity]", "1"))
        metadata = {
            key[len("metadata[") : -1]: value
            for key, value in params.items()
            if key.startswith("metadata[")
        }
        return {
            "id": session_id,
            "object": "checkout.session",
            "url": f"https://checkout.stripe.test/c/pay/{session_id}",
            "amount_total": unit * quantity,
            "currency": params.get("line_items[0][price_data][currency]", ""),
            "client_reference_id": params.get("client_reference_id"),
            "metadata": metadata,
            "mode": params.get("mode", "payment"),
            "payment_status": "unpaid",
            "status": "open",
            "success_url": params.get("success_url"),
            "cancel_url": params.get("cancel_url"),
            "payment_intent": None,
        }

    # --- the server ----------------------------------------------------------------------------

    def start(self) -> "FakeStripe":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                path, _, query = self.path.partition("?")
                request = StripeRequest(
                    method=self.command,
                    path=path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    params=dict(parse_qsl(body or query, keep_blank_values=True)),
                )
                status, payload, headers = fake.answer(request)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Request-Id", f"req_fake_{len(fake.requests)}")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET = do_DELETE = _handle

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
