"""Input as the schema states it: integers bounded by what the database holds, and values of
the JSON type their field documents.

Every integer column here is at most a bigint, so an input integer without its own bounds takes
the bigint's: a larger one is a 400 naming the field, never an overflow in the database driver
(tests/api/test_input.py checks that every input serializer's integers are bounded)."""

from collections.abc import Mapping

from django.http import QueryDict
from django.utils.translation import gettext as _
from rest_framework import serializers

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class IntegerField(serializers.IntegerField):
    def __init__(self, **kwargs):
        kwargs.setdefault("min_value", BIGINT_MIN)
        kwargs.setdefault("max_value", BIGINT_MAX)
        super().__init__(**kwargs)


# The JSON type of each kind of field, as the schema names it and Python reads it. Only where
# DRF would coerce a value of another type: it refuses a non-list for a list itself, for one.
JSON_TYPES = [
    (serializers.BooleanField, "boolean", (bool,)),
    (serializers.IntegerField | serializers.PrimaryKeyRelatedField, "integer", (int,)),
    (serializers.FloatField, "number", (int, float)),
    (
        serializers.CharField | serializers.SlugRelatedField | serializers.DateTimeField,
        "string",
        (str,),
    ),
]


def _json_type(field) -> tuple[str, tuple[type, ...]] | None:
    """The schema's name of the type `field` takes, and the Python types that are it."""
    if isinstance(field, serializers.MultipleChoiceField):
        return None
    if isinstance(field, serializers.ChoiceField):
        ints = all(isinstance(value, int) for value in field.choices)
        return ("integer", (int,)) if ints else ("string", (str,))
    for kind, name, types in JSON_TYPES:
        if isinstance(field, kind):
            return name, types
    return None


def _misfit(field, value) -> str | None:
    """The type `value` should have been, if it is not (in a list: its items')."""
    child = getattr(field, "child", None) or getattr(field, "child_relation", None)
    if child is not None:
        items = value if isinstance(value, list) else []
        return next(filter(None, (_misfit(child, item) for item in items)), None)
    json_type = _json_type(field)
    if value is None or json_type is None:
        return None  # null is the field's own check (allow_null)
    name, types = json_type
    if isinstance(value, bool) and bool not in types:
        return name  # a bool is an int to Python, not to JSON
    return None if isinstance(value, types) else name


class InputSerializer(serializers.Serializer):
    """The input of a write, read as the schema types it. DRF reads a JSON 5 as the text "5",
    "5" as the number 5 and 1 as true; here a JSON value of another type than its field's (or a
    list item of another type than its items') is a 400 naming the field, where DRF's own checks
    did not refuse it already. A form's values are all text, and read as DRF reads them (the
    schema documents JSON bodies only)."""

    def to_internal_value(self, data):
        misfits = {}
        if isinstance(data, Mapping) and not isinstance(data, QueryDict):
            for field in self._writable_fields:
                expected = _misfit(field, data.get(field.field_name))
                if expected:
                    message = _("Give a value of this field's type: %(type)s.")
                    misfits[field.field_name] = [message % {"type": expected}]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as refused:
            raise serializers.ValidationError({**misfits, **refused.detail}) from None
        if misfits:
            raise serializers.ValidationError(misfits)
        return value
