"""What no API input may hold, checked once for every route before any view, serializer,
filter or idempotency record reads it: a NUL character (U+0000) in a path value, a query value
or any string (or object key) of the body. PostgreSQL cannot hold NUL in text, so a lookup or a
write with one fails inside the database driver; the answer is a 400 naming where it was, and
never echoes the character back (a problem body is stored by the idempotency layer too)."""

from django.http import QueryDict
from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError

NUL = "\x00"


def shown(name) -> str:
    """A name fit to be echoed back: its NULs written as the two characters \\0."""
    return str(name).replace(NUL, "\\0")


def _join(path: str, name) -> str:
    return f"{path}.{shown(name)}" if path else shown(name)


def _nul_paths(value, path: str = ""):
    """The dotted paths of every string (or object key) in `value` that holds a NUL."""
    if isinstance(value, str):
        if NUL in value:
            yield path or "non_field_errors"
    elif isinstance(value, QueryDict):  # a form-encoded or multipart body
        for name, values in value.lists():
            if NUL in name or any(isinstance(item, str) and NUL in item for item in values):
                yield _join(path, name)
    elif isinstance(value, dict):
        for name, item in value.items():
            if isinstance(name, str) and NUL in name:
                yield _join(path, name)
            else:
                yield from _nul_paths(item, _join(path, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nul_paths(item, _join(path, index))


def reject_nul(request, path_values: dict) -> None:
    """Raise a 400 (ValidationError) naming each path value, query parameter and body string
    that holds a NUL."""
    message = _("Null characters are not allowed.")
    errors: dict[str, list[str]] = {}
    for name, value in path_values.items():
        if isinstance(value, str) and NUL in value:
            errors[shown(name)] = [message]
    for name, values in request.query_params.lists():
        if NUL in name or any(NUL in value for value in values):
            errors[shown(name)] = [message]
    if errors:  # the body is not read for a bad path or query
        raise ValidationError(errors)
    for path in _nul_paths(request.data):
        errors[path] = [message]
    if errors:
        raise ValidationError(errors)
