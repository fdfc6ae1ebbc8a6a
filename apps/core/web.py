"""Helpers shared by the HTMX/page views of every app."""

from contextlib import contextmanager
from types import SimpleNamespace

from django.contrib import messages
from django.core.exceptions import PermissionDenied as HttpPermissionDenied
from django.core.exceptions import ValidationError

from apps.core.errors import DomainError, PermissionDenied


@contextmanager
def refusals(request, form=None):
    """Turn a service's refusal into a form error (or a message), and a domain permission error
    into a 403; `outcome.refused` tells the view which way it went."""
    outcome = SimpleNamespace(refused=False)
    try:
        yield outcome
    except PermissionDenied as exc:
        raise HttpPermissionDenied(exc.message) from exc
    except ValidationError as exc:
        outcome.refused = True
        if form is not None:
            _add_errors(form, exc)
        else:
            messages.error(request, " ".join(exc.messages))
    except DomainError as exc:
        outcome.refused = True
        if form is not None:
            form.add_error(None, exc.message)
        else:
            messages.error(request, exc.message)


def _add_errors(form, exc: ValidationError) -> None:
    """Field errors land on the form's fields; those naming a service parameter the form
    does not have (e.g. `amount_minor` behind an `amount` field) are shown above the form."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for field, errors in exc.error_dict.items():
        form.add_error(field if field in form.fields else None, errors)


def client_ip(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None
