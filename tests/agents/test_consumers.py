"""The web terminal's WebSocket through the whole ASGI application (session cookie, origin
check, routing): who is refused with which close code, and a real shell in a throwaway sshd
that trusts the portal's CA, resized, audited from open to close."""

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client

from apps.agents import host_ca, terminal
from apps.core.models import AuditEvent
from apps.orders.models import InstanceState
from tests.factories import InstanceFactory, PoolFactory
from tests.throwaway_sshd import require_sshd, throwaway_sshd

pytestmark = pytest.mark.django_db(transaction=True)


def run_sync(coroutine_function):
    """`async_to_sync`, called from a thread of its own: a session that ran browser tests first
    keeps Playwright's event loop running in the main thread, where async_to_sync refuses."""

    def in_own_thread(*args):
        def call():
            try:
                return async_to_sync(coroutine_function)(*args)
            finally:
                connections.close_all()  # this thread's, before it goes

        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(call).result()

    return in_own_thread


ORIGIN = "http://localhost"
OUTPUT_TIMEOUT_S = 10


@pytest.fixture
def sshd_allowed():
    require_sshd()


def agent_host(organization, *, access=None, state=InstanceState.RUNNING, **extra):
    pool = PoolFactory(backend__driver="agent", backend__park=organization.park)
    access = access or {"address": "127.0.0.1", "ssh_port": 22}
    return InstanceFactory(
        organization=organization, pool=pool, state=state, access=access, **extra
    )


def communicator(user, instance, *, origin=ORIGIN, query="cols=100&rows=30"):
    from portal.asgi import application

    headers = [(b"origin", origin.encode())]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    path = f"/ws/instances/{instance.pk}/terminal/?{query}"
    return WebsocketCommunicator(application, path, headers=headers)


async def close_code(socket) -> int:
    connected, _ = await socket.connect()
    assert connected
    message = await socket.receive_output(timeout=OUTPUT_TIMEOUT_S)
    assert message["type"] == "websocket.close", message
    await socket.wait()
    return message["code"]


async def read_until(socket, pattern: str) -> str:
    seen = b""
    while not re.search(pattern, seen.decode(errors="replace")):
        try:
            message = await socket.receive_output(timeout=OUTPUT_TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(f"no {pattern!r} in {seen!r}") from None
        assert message["type"] == "websocket.send", (message, seen)
        seen += message["bytes"]
    return seen.decode(errors="replace")


@pytest.mark.parametrize(
    ("who", "state", "code"),
    [
        ("other_owner", InstanceState.RUNNING, terminal.NOT_FOUND),
        ("viewer", InstanceState.RUNNING, terminal.NOT_ALLOWED),
        ("billing", InstanceState.RUNNING, terminal.NOT_ALLOWED),
        ("member", InstanceState.STOPPED, terminal.NOT_RUNNING),
        ("owner", InstanceState.PROVISIONING, terminal.NOT_RUNNING),
        ("anonymous", InstanceState.RUNNING, terminal.NOT_SIGNED_IN),
    ],
)
def test_who_is_refused_and_why(request, organization, who, state, code):
    user = None if who == "anonymous" else request.getfixturevalue(who)
    instance = agent_host(organization, state=state)
    assert run_sync(close_code)(communicator(user, instance)) == code
    assert not AuditEvent.objects.filter(action=terminal.OPENED).exists()


def test_a_host_not_on_an_agent_server_has_no_terminal(organization, member):
    """Only agent hosts trust the portal's CA (their spec carries it)."""
    instance = InstanceFactory(
        organization=organization,
        running=True,
        pool=PoolFactory(backend__park=organization.park),
        access={"address": "127.0.0.1", "ssh_port": 22},
    )
    assert run_sync(close_code)(communicator(member, instance)) == terminal.NOT_RUNNING


def test_another_sites_page_cannot_open_it(organization, member):
    socket = communicator(member, agent_host(organization), origin="https://evil.example")

    async def attempt():
        connected, _ = await socket.connect()
        return connected

    assert run_sync(attempt)() is False


def test_a_page_a_host_serves_on_the_services_origin_cannot_open_it(organization, member, settings):
    """That origin shares the portal's host name (another port) and cookies, so the host-name
    check alone would let a host's script open a terminal as the member viewing it."""
    settings.LOAM_SERVICES_URL = "http://localhost:8444"
    refused = communicator(member, agent_host(organization), origin="http://localhost:8444")
    allowed = communicator(member, agent_host(organization), origin=ORIGIN)

    async def attempt(socket):
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    assert run_sync(attempt)(refused) is False
    assert run_sync(attempt)(allowed) is True


def test_a_host_whose_sshd_does_not_trust_the_ca_is_unreachable(
    organization, member, sshd_allowed, tmp_path
):
    stranger = host_ca.asyncssh.generate_private_key("ssh-ed25519").export_public_key()
    with throwaway_sshd(tmp_path / "sshd", trusted_ca_keys=[stranger.decode().strip()]) as sshd:
        instance = agent_host(organization, access=sshd.access())
        assert run_sync(close_code)(communicator(member, instance)) == terminal.UNREACHABLE
    assert not AuditEvent.objects.filter(action=terminal.OPENED).exists()


def test_an_sshd_presenting_another_key_than_the_hosts_is_not_taken_for_it(
    organization, member, sshd_allowed, tmp_path
):
    """Something else answering at the host's address and port (a host released and its port
    given to another tenant's, a server's sshd reached by mistake) gets no session: the keys
    the host's agent read from its sshd are the only ones accepted; none known, no session."""
    impostor = host_ca.asyncssh.generate_private_key("ssh-ed25519").export_public_key()
    with throwaway_sshd(tmp_path / "sshd", trusted_ca_keys=[host_ca.ca_public_key()]) as sshd:
        reported = {**sshd.access(), "ssh_host_keys": [impostor.decode().strip()]}
        unknown = {**sshd.access(), "ssh_host_keys": []}
        for access in (reported, unknown):
            instance = agent_host(organization, access=access)
            assert run_sync(close_code)(communicator(member, instance)) == terminal.UNREACHABLE
    assert not AuditEvent.objects.filter(action=terminal.OPENED).exists()


def test_a_member_gets_a_root_shell_resized_and_audited(
    organization, member, sshd_allowed, tmp_path
):
    with throwaway_sshd(tmp_path / "sshd", trusted_ca_keys=[host_ca.ca_public_key()]) as sshd:
        instance = agent_host(organization, access=sshd.access())
        socket = communicator(member, instance)

        async def session():
            connected, _ = await socket.connect()
            assert connected
            await socket.send_to(bytes_data=b"echo hi-$((6*7)); stty size; id -un\n")
            seen = await read_until(socket, r"hi-42\r\n30 100\r\nroot\r\n")
            await socket.send_to(text_data=json.dumps({"type": "resize", "cols": 120, "rows": 40}))
            await socket.send_to(text_data="not a control message")
            await socket.send_to(bytes_data=b"stty size\n")
            seen += await read_until(socket, r"\r\n?40 120\r\n")
            await socket.send_to(bytes_data=b"exit\n")
            while (message := await socket.receive_output(OUTPUT_TIMEOUT_S))["type"] != (
                "websocket.close"
            ):
                pass
            await socket.wait()
            return message["code"], seen

        code, seen = run_sync(session)()
    assert code == terminal.SHELL_ENDED
    opened = AuditEvent.objects.get(action=terminal.OPENED)
    closed = AuditEvent.objects.get(action=terminal.CLOSED)
    assert (opened.actor, opened.object_id, opened.organization_id) == (
        member,
        str(instance.pk),
        organization.pk,
    )
    assert opened.data == {"host": f"127.0.0.1:{sshd.port}"}
    assert closed.actor == member and closed.data["opened_event"] == opened.pk
    assert 0 <= closed.data["seconds"] < 60


def test_closing_the_page_ends_the_session(organization, owner, sshd_allowed, tmp_path):
    with throwaway_sshd(tmp_path / "sshd", trusted_ca_keys=[host_ca.ca_public_key()]) as sshd:
        socket = communicator(owner, agent_host(organization, access=sshd.access()))

        async def session():
            await socket.connect()
            await socket.send_to(bytes_data=b"echo ready-$((1+1))\n")
            await read_until(socket, r"ready-2")
            await socket.disconnect()
            await asyncio.sleep(0)

        run_sync(session)()
    assert AuditEvent.objects.filter(action=terminal.CLOSED, actor=owner).count() == 1
