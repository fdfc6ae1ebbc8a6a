"""Input rules for endpoints, shared by the services (which enforce them) and the API
serializers (which report them per field). Both raise Django's ValidationError."""

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
    except ValidationError:
        raise ValidationError(
            _("Enter an absolute http:// or https:// URL, such as https://example.com/hooks."),
            code="url_invalid",
        ) from None
    parts = urlsplit(url)
    if parts.username or parts.password:
        raise ValidationError(_("The URL must not contain a user name or password."), code="url")
    if parts.scheme != "https" and not conf.allow_http():
        raise ValidationError(_("The URL must use https://."), code="url_https_required")
    return url


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
