"""Every API error is RFC 9457 problem+json: type, title, status, detail, and field errors."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from apps.core.errors import DomainError

PROBLEM_TYPE = "https://loam.localhost/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"


def problem(*, status_code: int, code: str, title: str, detail: str, errors=None, headers=None):
    body = {
        "type": PROBLEM_TYPE + code,
        "title": title,
        "status": status_code,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    response = Response(body, status=status_code, headers=headers)
    response.content_type = PROBLEM_CONTENT_TYPE
    return response


def _title(status_code: int) -> str:
    from http import HTTPStatus

    return HTTPStatus(status_code).phrase


def flatten_errors(errors, prefix: str = "") -> dict[str, list[str]]:
    """{"event_types": {"0": ["…"]}} -> {"event_types.0": ["…"]}: one flat map of messages."""
    flat: dict[str, list[str]] = {}
    items = errors.items() if isinstance(errors, dict) else enumerate(errors)
    for name, value in items:
        key = f"{prefix}.{name}" if prefix else str(name)
        if isinstance(value, dict) or (
            isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
        ):
            flat.update(flatten_errors(value, key))
        elif isinstance(value, list):
            flat[key] = [str(v) for v in value]
        else:
            flat[key] = [str(value)]
    return flat


def _passed_headers(response) -> dict:
    return {
        name: response[name]
        for name in ("WWW-Authenticate", "Retry-After", "Allow")
        if name in response
    }


def handle_exception(exc, context):
    if isinstance(exc, DomainError):
        return problem(
            status_code=exc.status, code=exc.code, title=_title(exc.status), detail=exc.message
        )
    if isinstance(exc, DjangoValidationError):
        errors = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        return problem(
            status_code=400,
            code="invalid",
            title=_title(400),
            detail=" ".join(m for ms in errors.values() for m in ms),
            errors=errors,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(data if isinstance(data, dict) else {"non_field_errors": data})
        return problem(
            status_code=response.status_code,
            code="invalid",
            title=_title(response.status_code),
            detail="The request has invalid fields; see errors.",
            errors=errors,
            headers=_passed_headers(response),
        )
    detail = data.get("detail", "") if isinstance(data, dict) else str(data)
    code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
    return problem(
        status_code=response.status_code,
        code=str(code),
        title=_title(response.status_code),
        detail=str(detail),
        headers=_passed_headers(response),
    )
