"""A host's JupyterLab and TensorBoard through the production nginx: deploy/nginx/loam.conf
rendered as deploy/stack/start.sh renders it, a real nginx over HTTPS in front of the portal
(Django's live server) and, for the host's service, a small HTTP and WebSocket server that
records what reaches it. The services have an origin of their own (nginx's second server): the
portal's origin serves none, and a form posted from the services' origin is refused by the
portal. Signed out is sent to the portal's sign-in, another organization gets the site's 404,
the owner's requests reach the service with the host's secret and without the portal's cookies,
a WebSocket (a kernel's) passes, and a service that isn't listening yet is the portal's page
that tries again."""

import base64
import hashlib
import json
import re
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from http.client import HTTPSConnection
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from apps.agents.models import AgentHostPort, PortPurpose, ReportedState
from apps.orders.models import InstanceState
from tests.factories import (
    AgentHostFactory,
    AgentHostPortFactory,
    AgentServerFactory,
    ImageFactory,
    InstanceFactory,
    MembershipFactory,
    UserFactory,
)

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "deploy" / "nginx" / "loam.conf"
TOKEN = "s3cret-token-of-this-host"
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("nginx", "openssl", "envsubst")),
        reason="needs nginx, openssl and envsubst (deploy/stack/install.sh)",
    ),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ServiceHandler(socketserver.BaseRequestHandler):
    """A host's web service: answers a request with what it received (JSON) and a cookie of
    its own; a WebSocket handshake with 101, then echoes every byte."""

    def handle(self):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        lines = head.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
        method, path, _version = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _sep, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.server.seen.append({"method": method, "path": path, "headers": headers})
        # As a WebSocket server does (RFC 6455 §4.2.1): both headers, or no handshake.
        connection = {token.strip().lower() for token in headers.get("connection", "").split(",")}
        if headers.get("upgrade", "").lower() == "websocket" and "upgrade" in connection:
            accept = base64.b64encode(
                hashlib.sha1((headers["sec-websocket-key"] + WEBSOCKET_GUID).encode()).digest()
            ).decode()
            self.request.sendall(
                (
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                ).encode()
            )
            while data := self.request.recv(4096):
                self.request.sendall(data)
            return
        body = json.dumps({"path": path, "headers": headers}).encode()
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Set-Cookie: sessionid=planted-by-the-host; Path=/\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


@pytest.fixture
def service():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), ServiceHandler)
    server.daemon_threads = True
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@dataclass(frozen=True)
class Ports:
    portal: int  # the portal's HTTPS origin
    services: int  # the hosts' web services' origin (LOAM_SERVICES_URL)


@pytest.fixture
def nginx(live_server, tmp_path, settings):
    """nginx with the production site in front of the live server: its two HTTPS ports."""
    https_port, http_port, services_port = free_port(), free_port(), free_port()
    settings.LOAM_BASE_URL = f"https://127.0.0.1:{https_port}"
    settings.LOAM_SERVICES_URL = f"https://127.0.0.1:{services_port}"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1",
            "-keyout", tmp_path / "key.pem", "-out", tmp_path / "cert.pem",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    values = {
        "LOAM_SERVER_NAME": "127.0.0.1 localhost",
        "LOAM_HTTPS_LISTEN": f"127.0.0.1:{https_port}",
        "LOAM_HTTP_LISTEN": f"127.0.0.1:{http_port}",
        "LOAM_HTTPS_PORT_SUFFIX": f":{https_port}",
        "LOAM_TLS_CERTIFICATE": str(tmp_path / "cert.pem"),
        "LOAM_TLS_CERTIFICATE_KEY": str(tmp_path / "key.pem"),
        "LOAM_STATIC_ROOT": str(tmp_path / "static"),
        "LOAM_UPSTREAM": live_server.url.removeprefix("http://"),
        # The web terminal's Daphne: not asked here.
        "LOAM_ASGI_UPSTREAM": "unix:/nonexistent/asgi.sock",
        "LOAM_SERVICES_LISTEN": f"127.0.0.1:{services_port}",
        "LOAM_SERVICES_SERVER_NAME": "127.0.0.1 localhost",
        "LOAM_SERVICES_PORT_SUFFIX": f":{services_port}",
    }
    template = TEMPLATE.read_text()
    assert set(re.findall(r"\$\{(LOAM_\w+)\}", template)) == set(values)
    site = subprocess.run(
        ["envsubst", " ".join(f"${{{name}}}" for name in values)],
        input=template,
        env=values,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "nginx.conf").write_text(
        f"""worker_processes 1;
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log warn;
events {{ worker_connections 64; }}
http {{
    include /etc/nginx/mime.types;
    access_log {tmp_path}/access.log;
    client_body_temp_path {tmp_path}/tmp/client_body;
    proxy_temp_path {tmp_path}/tmp/proxy;
    fastcgi_temp_path {tmp_path}/tmp/fastcgi;
    uwsgi_temp_path {tmp_path}/tmp/uwsgi;
    scgi_temp_path {tmp_path}/tmp/scgi;
    include {tmp_path}/site.conf;
}}
"""
    )
    args = ["nginx", "-p", str(tmp_path), "-e", str(tmp_path / "error.log")]
    args += ["-c", str(tmp_path / "nginx.conf")]
    checked = subprocess.run([*args, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen([*args, "-g", "daemon off;"], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    for port in (https_port, services_port):
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read()
                assert time.monotonic() < deadline, "nginx did not listen"
                time.sleep(0.05)
    yield Ports(portal=https_port, services=services_port)
    process.terminate()
    process.wait(timeout=10)


def tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the test's own self-signed certificate
    return context


def get(port: int, path: str, user=None, headers=None, *, method="GET", body=None):
    """(status, headers, body) of a GET through nginx, signed in as `user` if given."""
    connection = HTTPSConnection("127.0.0.1", port, context=tls(), timeout=10)
    sent = dict(headers or {})
    if user is not None:
        sent["Cookie"] = "; ".join(filter(None, [session_cookie(user), sent.get("Cookie")]))
    connection.request(method, path, body=body, headers=sent)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, response, body


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.fixture
def world(service):
    """A running `pytorch` host whose JupyterLab is `service`, its owner, another
    organization's owner."""
    server = AgentServerFactory(public_address="127.0.0.1")
    instance = InstanceFactory(
        running=True,
        node=server.node,
        pool=server.node.pool,
        image=ImageFactory(code="pytorch"),
        backend_handle="h-nginx0001",
    )
    host = AgentHostFactory(
        handle="h-nginx0001",
        server=server,
        image="pytorch",
        reported_state=ReportedState.RUNNING,
        address="10.213.0.2",
        services=[
            {"name": "jupyter", "port": 8888, "base_url": f"/instances/{instance.pk}/jupyter/"}
        ],
        service_token=TOKEN,
    )
    AgentHostPortFactory(
        host=host,
        purpose=PortPurpose.SERVICE,
        host_port=8888,
        server_port=service.server_address[1],
    )
    owner, stranger = UserFactory(), UserFactory()
    MembershipFactory(organization=instance.organization, user=owner, role="owner")
    MembershipFactory(organization=InstanceFactory().organization, user=stranger, role="owner")
    assert instance.state == InstanceState.RUNNING
    return {"instance": instance, "owner": owner, "stranger": stranger}


def test_signed_out_is_sent_to_sign_in_and_back(nginx, world, service):
    pk = world["instance"].pk

    status, response, _body = get(nginx.services, f"/instances/{pk}/jupyter/lab?a=1&b=2")

    assert status == 302
    assert response.headers["Location"] == (
        f"https://127.0.0.1:{nginx.portal}/accounts/login/?next=/instances/{pk}/"
    )
    assert service.seen == []


def test_another_organization_gets_the_site_s_404(nginx, world, service):
    status, _response, body = get(
        nginx.services,
        f"/instances/{world['instance'].pk}/jupyter/",
        user=world["stranger"],
        headers={"Accept-Language": "en"},
    )

    assert status == 404
    assert b'class="navbar' in body and b"Page not found" in body  # Django's, not nginx's
    assert TOKEN.encode() not in body
    assert service.seen == []


def test_the_owner_reaches_the_service_with_the_host_s_secret_and_no_portal_cookie(
    nginx, world, service
):
    path = f"/instances/{world['instance'].pk}/jupyter/api/contents?type=directory"

    status, response, body = get(nginx.services, path, user=world["owner"])

    assert status == 200, body
    (seen,) = service.seen
    assert seen["path"] == path
    assert seen["headers"]["authorization"] == f"token {TOKEN}"
    assert "cookie" not in seen["headers"]  # the portal's session stays with the portal
    # What the browser's Origin names.
    assert seen["headers"]["host"] == f"127.0.0.1:{nginx.services}"
    assert response.headers.get("Set-Cookie") is None  # nor does the host set the portal's


def test_a_websocket_passes_both_ways(nginx, world, service):
    raw = socket.create_connection(("127.0.0.1", nginx.services), timeout=10)
    stream = tls().wrap_socket(raw, server_hostname="127.0.0.1")
    path = f"/instances/{world['instance'].pk}/jupyter/api/kernels/k1/channels"
    stream.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{nginx.services}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Origin: https://127.0.0.1:{nginx.services}\r\n"
            f"Cookie: {session_cookie(world['owner'])}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += stream.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    stream.sendall(b"\x81\x05hello")  # a text frame, as far as an echo cares
    echoed = b""
    while len(echoed) < 7:
        echoed += stream.recv(4096)
    stream.close()

    assert echoed == b"\x81\x05hello"
    (seen,) = service.seen
    assert seen["headers"]["authorization"] == f"token {TOKEN}"
    assert seen["headers"]["upgrade"] == "websocket"


def test_a_service_not_answering_yet_is_the_portal_s_page_that_retries(nginx, world, service):
    port = free_port()  # nothing listens there: the service has not started yet
    AgentHostPort.objects.filter(purpose=PortPurpose.SERVICE).update(server_port=port)

    status, response, body = get(
        nginx.services,
        f"/instances/{world['instance'].pk}/jupyter/lab",
        user=world["owner"],
        headers={"Accept-Language": "en"},
    )

    assert status == 503
    assert response.headers["Refresh"] == "3"
    assert b'class="navbar' in body and b"JupyterLab isn't answering yet" in body


def test_the_check_itself_is_no_page(nginx, world):
    for port in (nginx.portal, nginx.services):
        status, _response, _body = get(
            port,
            "/internal/host-service-auth/",
            user=world["owner"],
            headers={"X-Original-URI": f"/instances/{world['instance'].pk}/jupyter/"},
        )

        assert status == 404


def test_the_portal_s_origin_serves_no_host_s_page(nginx, world, service):
    status, _response, body = get(
        nginx.portal,
        f"/instances/{world['instance'].pk}/jupyter/lab",
        user=world["owner"],
        headers={"Accept-Language": "en"},
    )

    assert status == 404 and b"Page not found" in body
    assert service.seen == []


def test_a_form_posted_from_the_services_origin_is_refused_by_the_portal(nginx, world):
    """What a script a host serves could try with a member's cookies: the portal's forms take
    posts from its own origin only (CSRF's Origin check), even with the right token."""
    token = "t" * 32

    def post_from(origin_port: int) -> int:
        status, _response, _body = get(
            nginx.portal,
            "/i18n/setlang/",
            user=world["owner"],
            method="POST",
            body=f"language=en&csrfmiddlewaretoken={token}",
            headers={
                "Cookie": f"{settings.CSRF_COOKIE_NAME}={token}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Origin": f"https://127.0.0.1:{origin_port}",
                "Referer": f"https://127.0.0.1:{origin_port}/",
            },
        )
        return status

    assert post_from(nginx.services) == 403
    assert post_from(nginx.portal) == 302  # the same post from the portal's own pages
