"""Helpers shared by the HTMX/page views of every app."""

import ipaddress
from collections.abc import Mapping
from contextlib import contextmanager
from types import SimpleNamespace

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied as HttpPermissionDenied
from django.core.exceptions import ValidationError
from django.utils.http import url_has_allowed_host_and_scheme

from apps.core.errors import DomainError, PermissionDenied


@contextmanager
def refusals(request, form=None, *, field_names: Mapping | None = None):
    """Turn a service's refusal into a form error (or a message), and a domain permission error
    into a 403; `outcome.refused` tells the view which way it went. `field_names` maps a
    service's parameter to the form field that holds it, where their names differ."""
    outcome = SimpleNamespace(refused=False)
    try:
        yield outcome
    except PermissionDenied as exc:
        raise HttpPermissionDenied(exc.message) from exc
    except ValidationError as exc:
        outcome.refused = True
        if form is not None:
            _add_errors(form, exc, field_names or {})
        else:
            messages.error(request, " ".join(exc.messages))
    except DomainError as exc:
        outcome.refused = True
        if form is not None:
            form.add_error(None, exc.message)
        else:
            messages.error(request, exc.message)


def _add_errors(form, exc: ValidationError, field_names: Mapping) -> None:
    """Field errors land on the form's fields; those naming a service parameter the form
    does not have (e.g. `amount_minor` behind an `amount` field) are shown above the form."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for field, errors in exc.error_dict.items():
        field = field_names.get(field, field)
        form.add_error(field if field in form.fields else None, errors)


def client_ip(request) -> str | None:
    """The client's address: behind a proxy, the header it sets (the one allauth's login rate
    limits trust too); else REMOTE_ADDR. Anything that is not an address counts as unknown."""
    if request is None:
        return None
    header = settings.ALLAUTH_TRUSTED_CLIENT_IP_HEADER
    value = (request.headers.get(header, "") if header else "") or request.META.get("REMOTE_ADDR")
    try:
        return str(ipaddress.ip_address((value or "").split(",")[0].strip()))
    except ValueError:
        return None


def back_to(request, default: str) -> str:
    """Where a non-HTMX action returns: the posted `next` (the filtered list it came from) if
    it is a path on this site, else `default` (a path or a URL name)."""
    target = request.POST.get("next", "")
    # A path on this site only: redirect() would read "x" without a "/" as a URL name, and fail.
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default
