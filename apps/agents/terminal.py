"""The web terminal: a root shell in a running agent host, in the browser.

The page (`views.instance_terminal`) opens a WebSocket (`consumers.TerminalConsumer`, routed in
`portal/asgi.py`); this module decides who may open one, logs in to the host's sshd where its
tenants reach it (`Instance.access`: address and SSH port) with a key and certificate signed for
this session only (`host_ca.sign_user_key`), accepting only the host keys its agent read from the
host's sshd when it started, and relays bytes both ways. Each session is two
audit events: `instance.terminal_opened` (who, which host, where from) and
`instance.terminal_closed` (how long it lasted).

The WebSocket's frames: binary both ways is the terminal's bytes (keystrokes in, output out);
a text frame from the browser is a control message, `{"type": "resize", "cols": C, "rows": R}`.
The initial size comes in the URL's query (`?cols=C&rows=R`). The socket is closed with one of
the codes below when refused, and with 1000 when the shell ends.
"""

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

import asyncssh
from django.utils import timezone

from apps.agents import host_ca
from apps.core.audit import record_event
from apps.core.models import AuditEvent
from apps.orchestration.backends.base import Capability
from apps.orchestration.backends.registry import supports
from apps.orders.models import Instance, InstanceState
from apps.tenants.access import role_of
from apps.tenants.roles import Action, can

# Close codes the page explains (4000-4999 are the application's own).
NOT_SIGNED_IN = 4401
NOT_ALLOWED = 4403
NOT_FOUND = 4404
NOT_RUNNING = 4409
UNREACHABLE = 4502
SHELL_ENDED = 1000

OPENED = "instance.terminal_opened"
CLOSED = "instance.terminal_closed"
TERM_TYPE = "xterm-256color"
CONNECT_TIMEOUT_S = 15
DEFAULT_SIZE = (80, 24)
MAX_SIZE = (1000, 500)
READ_CHUNK = 64 * 1024


class TerminalRefused(Exception):
    """The socket is closed with `code` (one the page explains)."""

    def __init__(self, code: int, detail: str = ""):
        super().__init__(detail or str(code))
        self.code = code


def has_terminal(instance: Instance) -> bool:
    """Running, with an SSH endpoint, on a backend whose hosts trust the portal's CA."""
    return (
        instance.state == InstanceState.RUNNING
        and instance.pool is not None
        and supports(instance.pool.backend.driver, Capability.TERMINAL)
        and bool(instance.access.get("address"))
    )


def may_open_terminal(user, instance: Instance) -> bool:
    """A member of the host's organization whose role may operate hosts (stop, start)."""
    return can(role_of(user, instance.organization), Action.ORDER)


def terminal_target(*, user, instance_id: int) -> Instance:
    """The host `user` may open a terminal in, or TerminalRefused: another organization's host
    (or none) is not found, a role that may not operate hosts is not allowed, a host that is not
    running (or has no SSH endpoint) has no terminal."""
    if user is None or not user.is_authenticated:
        raise TerminalRefused(NOT_SIGNED_IN)
    instance = (
        Instance.objects.select_related("organization__park", "pool__backend")
        .filter(pk=instance_id)
        .first()
    )
    if instance is None or role_of(user, instance.organization) is None:
        raise TerminalRefused(NOT_FOUND)
    if not may_open_terminal(user, instance):
        raise TerminalRefused(NOT_ALLOWED)
    if not has_terminal(instance):
        raise TerminalRefused(NOT_RUNNING)
    return instance


@dataclass(frozen=True)
class Endpoint:
    """Where the host's sshd is reached, and the keys it presents (its agent read them)."""

    address: str
    port: int
    host_keys: tuple[str, ...]


def endpoint_of(instance: Instance) -> Endpoint:
    access = instance.access
    keys = tuple(access.get("ssh_host_keys") or ())
    return Endpoint(access["address"], int(access.get("ssh_port") or 22), keys)


def terminal_size(query: dict[str, list[str]]) -> tuple[int, int]:
    """(cols, rows) from the socket's query string; the default where absent or not a size."""
    return _size((query.get("cols") or [None])[0], (query.get("rows") or [None])[0], DEFAULT_SIZE)


def _size(cols, rows, default):
    try:
        cols, rows = int(cols), int(rows)
    except (TypeError, ValueError):
        return default
    if not (1 <= cols <= MAX_SIZE[0] and 1 <= rows <= MAX_SIZE[1]):
        return default
    return cols, rows


def resize_of(text: str) -> tuple[int, int] | None:
    """The size a control frame asks for; None for anything else (ignored)."""
    try:
        message = json.loads(text)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("type") != "resize":
        return None
    return _size(message.get("cols"), message.get("rows"), None)


def record_opened(*, user, instance: Instance, ip_address: str | None) -> AuditEvent:
    endpoint = endpoint_of(instance)
    return record_event(
        action=OPENED,
        actor=user,
        target=instance,
        ip_address=ip_address,
        data={"host": f"{endpoint.address}:{endpoint.port}"},
    )


def record_closed(*, user, instance: Instance, opened: AuditEvent, ip_address: str | None):
    return record_event(
        action=CLOSED,
        actor=user,
        target=instance,
        ip_address=ip_address,
        data={
            "opened_event": opened.pk,
            "seconds": round((timezone.now() - opened.created_at).total_seconds()),
        },
    )


@dataclass
class TerminalSession:
    """A shell on a pty in the host, over one SSH connection of its own."""

    connection: asyncssh.SSHClientConnection
    process: asyncssh.SSHClientProcess
    _closed: bool = field(default=False, init=False)

    @classmethod
    async def open(
        cls, *, endpoint: Endpoint, key_id: str, size: tuple[int, int]
    ) -> "TerminalSession":
        """Log in as root with a certificate made now; TerminalRefused(UNREACHABLE) if the
        host's sshd cannot be reached, refuses it, or presents a key other than the host's
        (whatever answers at that address and port is not taken for the host)."""
        if not endpoint.host_keys:
            raise TerminalRefused(UNREACHABLE, "the host's SSH key is not known yet")
        credential = host_ca.sign_user_key(key_id=key_id)
        host_keys = [asyncssh.import_public_key(key) for key in endpoint.host_keys]
        try:
            connection = await asyncssh.connect(
                endpoint.address,
                endpoint.port,
                username=host_ca.PRINCIPAL,
                client_keys=credential.client_keys(),
                known_hosts=(host_keys, [], []),
                agent_path=None,
                config=None,
                preferred_auth="publickey",
                connect_timeout=CONNECT_TIMEOUT_S,
            )
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise TerminalRefused(UNREACHABLE, str(exc)) from exc
        try:
            process = await connection.create_process(
                term_type=TERM_TYPE, term_size=size, encoding=None
            )
        except (OSError, asyncssh.Error) as exc:
            connection.close()
            raise TerminalRefused(UNREACHABLE, str(exc)) from exc
        return cls(connection=connection, process=process)

    async def relay_output(self, send) -> None:
        """`await send(bytes)` each piece of the terminal's output until the shell ends."""
        while True:
            try:
                data = await self.process.stdout.read(READ_CHUNK)
            except (asyncssh.Error, OSError):
                return
            if not data:
                return
            await send(data)

    def write(self, data: bytes) -> None:
        if not self._closed:
            self.process.stdin.write(data)

    def resize(self, size: tuple[int, int]) -> None:
        if not self._closed:
            self.process.change_terminal_size(*size)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.connection.close()
        # A host that stopped answering is not waited for: the session is over either way.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connection.wait_closed(), timeout=5)
