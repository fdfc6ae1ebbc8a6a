"""The HTTP POST of one delivery, sent only to addresses that were checked.

The worker runs inside the park's network, so unless LOAM_WEBHOOKS_ALLOW_PRIVATE (default:
DEBUG) an endpoint that resolves to a loopback, private, link-local or otherwise non-public
address is refused, so that a tenant cannot make Loam call the park's internal services.

The endpoint's name is resolved once, every address it answers must pass, and the connection is
opened to one of those very addresses, never by name: a second lookup could answer differently
(DNS rebinding: a public address for the check, 127.0.0.1 for the request). Over https the
handshake still carries the name (SNI) and the certificate is verified against it; the Host
header is the name too. No redirect is followed: the signed body goes only to the URL the
tenant registered.

Whatever the far end says reaches the tenant (the delivery log) only through `excerpt`.
"""

import http.client
import ipaddress
import socket
import ssl
from contextlib import suppress
from dataclasses import dataclass
from urllib.parse import urlsplit

from apps.webhooks import conf
from apps.webhooks.validators import is_public_address

EXCERPT_CHARS = 200
# Read of a failed answer's body: room for EXCERPT_CHARS characters once whitespace is folded.
RESPONSE_READ_BYTES = 1024


class DestinationRefused(Exception):
    """The endpoint resolves to an address that deliveries may not go to; str() says why."""


@dataclass(frozen=True)
class Destination:
    """An endpoint URL resolved once: the addresses to connect to, the name to present there."""

    scheme: str
    host: str  # the URL's host: SNI, certificate check and Host header
    port: int
    target: str  # path and query, for the request line
    addresses: tuple[tuple[socket.AddressFamily, tuple], ...]  # (family, sockaddr), all checked


def excerpt(text: str) -> str:
    """At most EXCERPT_CHARS printable characters of `text`, runs of whitespace and control
    characters folded into one space: it is stored for the tenant to read, so neither the
    page a receiver answered nor terminal escapes or NULs are kept."""
    printable = "".join(char if char.isprintable() else " " for char in text)
    return " ".join(printable.split())[:EXCERPT_CHARS]


def resolve(url: str) -> Destination:
    """`url`'s host resolved once, each address checked. Raises DestinationRefused for an
    address that is not public (unless allowed), OSError when the name does not resolve."""
    parts = urlsplit(url)
    host = (parts.hostname or "").replace("%25", "%")  # an IPv6 zone is %-encoded in a URL
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # out of range: an endpoint registered before validate_url checked it
        raise DestinationRefused(f"{url} has no valid port.") from None
    # A literal is checked as written: its zone may name no interface on this machine.
    with suppress(ValueError):  # not a literal but a name
        _refuse_unless_public(host, ipaddress.ip_address(host.split("%")[0]))
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = tuple(dict.fromkeys((family, sockaddr) for family, _, _, _, sockaddr in found))
    for _family, sockaddr in addresses:
        _refuse_unless_public(host, sockaddr[0])
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Destination(parts.scheme, host, port, target, addresses)


def _refuse_unless_public(host: str, address) -> None:
    if not conf.allow_private() and not is_public_address(address):
        raise DestinationRefused(
            f"{host} resolves to {address}, which is not a public address; webhooks are "
            "delivered to public addresses only."
        )


def post(url: str, *, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """POST `body` to `url` once. Returns the answer's status code (None without one) and the
    error: "" after a 2xx answer, else a short description, safe to store. Raises
    DestinationRefused (nothing is sent then)."""
    try:
        destination = resolve(url)
        connection = _connect(destination)
        try:
            connection.request("POST", destination.target, body=body, headers=headers)
            response = connection.getresponse()
            if 200 <= response.status < 300:
                return response.status, ""
            text = excerpt(response.read(RESPONSE_READ_BYTES).decode("utf-8", errors="replace"))
        finally:
            connection.close()
    except TimeoutError:
        return None, f"Timeout: no answer within {conf.TIMEOUT_S} s"
    except ssl.SSLError as exc:  # a certificate that does not match the name, among others
        return None, excerpt(f"SSLError: {exc}")
    except OSError as exc:  # unresolvable, refused, reset: retried like any failed attempt
        return None, excerpt(f"ConnectionError: {exc}")
    except http.client.HTTPException as exc:  # a malformed answer, which it may quote
        return None, excerpt(f"{type(exc).__name__}: {exc}")
    return response.status, f"HTTP {response.status}" + (f": {text}" if text else "")


def _connect(destination: Destination) -> http.client.HTTPConnection:
    """A connection to the first checked address that accepts one (TLS done for https)."""
    refused: OSError | None = None
    for family, sockaddr in destination.addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(conf.TIMEOUT_S)
        try:
            sock.connect(sockaddr)
            break
        except OSError as exc:
            sock.close()
            refused = exc
    else:
        raise refused  # getaddrinfo answers at least one address or raises
    if destination.scheme == "https":
        # The system's trust store (SSL_CERT_FILE / SSL_CERT_DIR may point elsewhere).
        tls = ssl.create_default_context()
        sock = tls.wrap_socket(sock, server_hostname=destination.host)
        connection = http.client.HTTPSConnection(destination.host, destination.port, context=tls)
    else:
        connection = http.client.HTTPConnection(destination.host, destination.port)
    connection.sock = sock  # already connected: http.client must not look the name up again
    return connection
