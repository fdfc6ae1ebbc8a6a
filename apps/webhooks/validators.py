"""Input rules for endpoints, shared by the services (which enforce them) and the API
serializers (which report them per field). Both raise Django's ValidationError."""

import ipaddress
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.utils.translation import gettext as _

from apps.webhooks import conf
from apps.webhooks.models import EVENT_TYPES, URL_MAX_LENGTH


def validate_url(value: str) -> str:
    """An absolute http(s) URL without credentials; https only unless LOAM_WEBHOOKS_ALLOW_HTTP."""
    url = (value or "").strip()
    if not url:
        raise ValidationError(_("Give the URL that receives the events."), code="url_required")
    if len(url) > URL_MAX_LENGTH:
        raise ValidationError(
            _("The URL is longer than %(max)d characters.") % {"max": URL_MAX_LENGTH},
            code="url_too_long",
        )
    try:
        URLValidator(schemes=["http", "https"])(url)
        parts = urlsplit(url)
        # URLValidator lets any five digits through as a port: `port` raises beyond 65535.
        if parts.port == 0:
            raise ValueError("port 0")
    except (ValidationError, ValueError):
        raise ValidationError(
            _("Enter an absolute http:// or https:// URL, such as https://example.com/hooks."),
            code="url_invalid",
        ) from None
    if parts.username or parts.password:
        raise ValidationError(_("The URL must not contain a user name or password."), code="url")
    if parts.scheme != "https" and not conf.allow_http():
        raise ValidationError(_("The URL must use https://."), code="url_https_required")
    if not conf.allow_private():
        try:
            literal = ipaddress.ip_address((parts.hostname or "").split("%")[0])
        except ValueError:
            literal = None  # a name: resolved and checked at each delivery (transport)
        if literal is not None and not is_public_address(literal):
            raise ValidationError(
                _("Webhooks are delivered to public addresses only; %(address)s is not one.")
                % {"address": parts.hostname},
                code="url_not_public",
            )
    return url


# IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64's well-known and
# local-use prefixes (RFC 6052, RFC 8215) and the deprecated IPv4-compatible form (::a.b.c.d).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, IPv4-compatible, NAT64, 6to4
    or Teredo), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in _NAT64):
        return low
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # not :: nor ::1
        return low
    return None


def is_public_address(address) -> bool:
    """Whether a delivery may go to `address` (an address or its text, a zone id allowed): a
    global address, and for an IPv6 form of an IPv4 address, a global IPv4 address too, so
    that [::ffff:127.0.0.1], [::127.0.0.1], [64:ff9b::a9fe:a9fe] or [2002:a9fe:a9fe::1] do not
    reach the park's own network."""
    ip = ipaddress.ip_address(str(address).split("%")[0])
    if ip.version == 6:
        inner = embedded_ipv4(ip)
        if inner is not None:
            return inner.is_global
    return ip.is_global


def validate_event_types(value) -> list[str]:
    """A non-empty list of known event type names; duplicates are dropped, order kept."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValidationError(_("Give the event types as a list of names."), code="event_types")
    if not value:
        raise ValidationError(_("Subscribe to at least one event type."), code="event_types")
    unknown = [v for v in value if v not in EVENT_TYPES]
    if unknown:
        raise ValidationError(
            _("Unknown event type: %(unknown)s. Allowed: %(allowed)s.")
            % {"unknown": ", ".join(unknown), "allowed": ", ".join(EVENT_TYPES)},
            code="event_type_unknown",
        )
    return list(dict.fromkeys(value))
