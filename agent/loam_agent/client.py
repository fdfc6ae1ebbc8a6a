"""The agent's side of the portal's agent API (docs/agent-protocol.md), over httpx.

Transient failures (the network, a timeout, 408/425/429/5xx) are retried with exponential
backoff and jitter; 401/403 are final: a refused join token or a revoked credential doesn't
come right by asking again.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
from pathlib import Path

import httpx

from loam_agent import __version__
from loam_agent.credential import Credential

logger = logging.getLogger(__name__)

ENROL_PATH = "/api/v1/agent/enrol"
HEARTBEAT_PATH = "/api/v1/agent/heartbeat"
HOSTS_PATH = "/api/v1/agent/hosts"
HOSTS_REPORT_PATH = "/api/v1/agent/hosts/report"
TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# A saved image's archive is gigabytes: each read or write may wait this long, not the whole.
TRANSFER_TIMEOUT_S = 120.0
CHUNK = 1 << 20


class PortalError(Exception):
    pass


class Rejected(PortalError):
    """The portal refused the join token or the credential (401/403); retrying won't help."""


class PortalUnavailable(PortalError):
    """Every attempt failed transiently, or the agent was told to stop while waiting to retry."""


class ProtocolError(PortalError):
    """The portal answered something this agent can't use (another 4xx, a malformed body)."""


class HostsNotSupported(ProtocolError):
    """The portal answered 404 to the hosts API: an older portal without GPU cloud hosts."""


class PortalClient:
    def __init__(
        self,
        portal_url: str,
        *,
        credential: Credential | None = None,
        ca_bundle: Path | None = None,
        timeout_s: float = 10.0,
        attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.portal_url = portal_url
        # The saved images the portal keeps on this server, from its last hosts list.
        self.saved_images: list[str] | None = None
        # The saved images to send to the portal or fetch from it (image_copies.py), likewise.
        self.image_transfers: list[dict] = []
        self._credential = credential
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        # Set by SIGTERM: a wait between retries ends at once.
        self._stop = stop or threading.Event()
        self._http = httpx.Client(
            base_url=portal_url,
            verify=str(ca_bundle) if ca_bundle else True,
            timeout=timeout_s,
            headers={"User-Agent": f"loam-agent/{__version__}"},
        )

    def __enter__(self) -> PortalClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def enrol(self, *, join_token: str, facts: dict) -> Credential:
        """Trade a single-use join token and the server's facts for the server's credential."""
        response = self._post(
            ENROL_PATH,
            {"join_token": join_token, **facts},
            headers={},
            refused="the portal refused the join token (unknown, expired or already used)",
        )
        try:
            body = response.json()
            server_id, secret = body["server_id"], body["credential"]
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(
                f"enrolment answered HTTP {response.status_code} without server_id and credential"
            ) from None
        if not (isinstance(server_id, str) and isinstance(secret, str) and server_id and secret):
            raise ProtocolError("enrolment answered an empty server_id or credential")
        return Credential(portal_url=self.portal_url, server_id=server_id, secret=secret)

    def heartbeat(self, payload: dict) -> None:
        if self._credential is None:
            raise ValueError("heartbeat needs the client built with a credential")
        self._post(
            HEARTBEAT_PATH,
            payload,
            headers={"Authorization": f"Bearer {self._credential.secret}"},
            refused=(
                "the portal refused this server's credential (revoked, or the server was "
                "removed); enrol again with a new join token"
            ),
        )

    def desired_hosts(
        self, etag: str | None
    ) -> tuple[str | None, list[dict] | None, list[dict] | None]:
        """The hosts and the volumes the portal wants, and the ETag for next time; both None
        while unchanged (volumes None too from a portal that lists none: an older one)."""
        headers = self._bearer()
        if etag:
            headers["If-None-Match"] = etag
        response = self._send("GET", HOSTS_PATH, None, headers=headers, refused=_REFUSED)
        if response.status_code == 304:
            return etag, None, None
        try:
            body = response.json()
            hosts, volumes = body["hosts"], body.get("volumes")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ProtocolError(f"{HOSTS_PATH} answered a body without a hosts list") from None
        if not isinstance(hosts, list) or not isinstance(volumes, list | None):
            raise ProtocolError(f"{HOSTS_PATH} answered hosts or volumes that are not a list")
        kept = body.get("saved_images")
        # None from a portal that sends none: then nothing saved here is removed.
        self.saved_images = [str(name) for name in kept] if isinstance(kept, list) else None
        transfers = body.get("image_transfers")
        self.image_transfers = (
            [item for item in transfers if isinstance(item, dict)]
            if isinstance(transfers, list)
            else []
        )
        return response.headers.get("ETag"), hosts, volumes

    def report_hosts(
        self, sequence: int, hosts: list[dict], volumes: list[dict] | None = None
    ) -> None:
        """What `hosts` (and the server's `volumes`) are, in the report numbered `sequence`
        (a retry keeps its number)."""
        body = {"sequence": sequence, "hosts": hosts}
        if volumes is not None:
            body["volumes"] = volumes
        self._send("POST", HOSTS_REPORT_PATH, body, headers=self._bearer(), refused=_REFUSED)

    def send_archive(self, url: str, archive: Path, sha256: str) -> None:
        """PUT a saved image's archive to the portal (once: a failed send is sent again when
        the portal still lists it)."""
        size = archive.stat().st_size
        headers = {
            **self._bearer(),
            "Content-Type": "application/x-tar",
            "Content-Length": str(size),
            "X-Loam-Sha256": sha256,
        }
        with open(archive, "rb") as file:
            response = self._transfer("PUT", url, headers=headers, content=file)
        response.close()

    def fetch_archive(self, url: str, target: Path) -> str:
        """GET a saved image's archive into `target`; returns the sha256 of what arrived."""
        hasher = hashlib.sha256()
        request = self._http.build_request(
            "GET", url, headers=self._bearer(), timeout=TRANSFER_TIMEOUT_S
        )
        response = self._transfer_response(request)
        try:
            with open(target, "wb") as file:
                for chunk in response.iter_bytes(CHUNK):
                    file.write(chunk)
                    hasher.update(chunk)
        except httpx.TransportError as error:
            raise PortalUnavailable(f"{url}: {type(error).__name__}: {error}") from None
        finally:
            response.close()
        return hasher.hexdigest()

    def report_copy(self, name: str, *, sha256: str = "", error: str = "") -> None:
        """The portal told that saved image `name` is unpacked here (its archive's sha256),
        or that its transfer failed for good (`error`)."""
        body = {"sha256": sha256} if sha256 else {"error": error[:2000]}
        path = f"/api/v1/agent/saved-images/{name}/copied"
        self._send("POST", path, body, headers=self._bearer(), refused=_REFUSED)

    def _transfer(self, method: str, url: str, *, headers: dict, content) -> httpx.Response:
        request = self._http.build_request(
            method, url, headers=headers, content=content, timeout=TRANSFER_TIMEOUT_S
        )
        return self._transfer_response(request)

    def _transfer_response(self, request: httpx.Request) -> httpx.Response:
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            raise PortalUnavailable(f"{request.url}: {type(error).__name__}: {error}") from None
        if response.is_success:
            return response
        response.read()
        response.close()
        if response.status_code in (401, 403):
            raise Rejected(f"{_REFUSED}: HTTP {response.status_code} {_detail(response)}")
        if response.status_code in TRANSIENT_STATUSES:
            raise PortalUnavailable(f"{request.url}: HTTP {response.status_code}")
        raise ProtocolError(
            f"{request.url.path} answered HTTP {response.status_code}: {_detail(response)}"
        )

    def _bearer(self) -> dict:
        if self._credential is None:
            raise ValueError("the hosts API needs the client built with a credential")
        return {"Authorization": f"Bearer {self._credential.secret}"}

    def _post(self, path: str, body: dict, *, headers: dict, refused: str) -> httpx.Response:
        return self._send("POST", path, body, headers=headers, refused=refused)

    def _send(
        self, method: str, path: str, body: dict | None, *, headers: dict, refused: str
    ) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            retry_after = None
            try:
                response = self._http.request(method, path, json=body, headers=headers)
            except httpx.TransportError as error:
                reason = f"{type(error).__name__}: {error}"
            else:
                if response.is_success or response.status_code == 304:
                    return response
                if response.status_code == 404 and path.startswith(HOSTS_PATH):
                    raise HostsNotSupported(
                        f"{path} answered HTTP 404: the portal has no hosts API"
                    )
                if response.status_code in (401, 403):
                    raise Rejected(f"{refused}: HTTP {response.status_code} {_detail(response)}")
                if response.status_code not in TRANSIENT_STATUSES:
                    raise ProtocolError(
                        f"{path} answered HTTP {response.status_code}: {_detail(response)}"
                    )
                reason = f"HTTP {response.status_code} {_detail(response)}"
                retry_after = _retry_after_s(response)
            if attempt == self._attempts:
                raise PortalUnavailable(f"{path}: gave up after {attempt} attempts; last: {reason}")
            delay = self._delay_s(attempt, retry_after)
            logger.warning("%s failed (%s); attempt %d in %.1f s", path, reason, attempt + 1, delay)
            if self._stop.wait(delay):
                raise PortalUnavailable(f"{path}: stopped while waiting to retry; last: {reason}")

    def _delay_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_backoff_s)
        # Full backoff times a random factor, so servers cut off together don't return together.
        backoff = min(self._backoff_s * 2 ** (attempt - 1), self._max_backoff_s)
        return backoff * random.uniform(0.5, 1.0)


_REFUSED = (
    "the portal refused this server's credential (revoked, or the server was removed); "
    "enrol again with a new join token"
)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


def _detail(response: httpx.Response) -> str:
    """The portal's reason: a problem+json `detail`, or the start of the body."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail else response.text[:200]
