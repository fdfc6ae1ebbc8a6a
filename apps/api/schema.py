"""The API's OpenAPI schema: what drf-spectacular infers, with what the API does instead where
they differ, and every operation's problem+json errors (post-processing)."""

from drf_spectacular import openapi
from rest_framework import serializers


class AutoSchema(openapi.AutoSchema):
    """Only a GET reads a list's filters and answers pages: a POST that answers a list (orders
    for several hosts) answers all of it, and takes no query parameters. Bodies are documented
    as JSON only: the API still reads forms (the browsable API's), but a form cannot carry the
    types the schema states (every value is text, an empty one reads as absent)."""

    def map_parsers(self):
        return [media_type for media_type in super().map_parsers() if media_type.endswith("json")]

    def get_filter_backends(self):
        return super().get_filter_backends() if self.method == "GET" else []

    def _get_paginator(self):
        return super()._get_paginator() if self.method == "GET" else None

    def _get_serializer_field_meta(self, field, direction):
        """A text field that may not be blank takes at least one character (what drf-spectacular
        documents only with COMPONENT_SPLIT_REQUEST, which would rename every component)."""
        meta = super()._get_serializer_field_meta(field, direction)
        text = isinstance(field, serializers.CharField) and not field.allow_blank
        if text and direction == "request" and not field.read_only:
            meta["minLength"] = 1
        return meta


PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details.",
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "object",
            "description": "Field name -> messages, for invalid input.",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["type", "title", "status", "detail"],
}
ERRORS = {
    "400": "Invalid input: `errors` names each field.",
    "401": "No, an invalid, an expired or a revoked API key.",
    "403": "The role or key scope does not allow this.",
    "404": "No such object in your organization.",
    "409": "Conflict: wrong state, quota or capacity exhausted, or an Idempotency-Key reused.",
    "422": "Well-formed but not possible here: a resize to another family's flavor, or work "
    "the backend does not run.",
    "429": "Too many requests: see Retry-After.",
}


def add_problem_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    reference = {"$ref": "#/components/schemas/Problem"}
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for status, description in ERRORS.items():
                operation["responses"].setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"application/problem+json": {"schema": reference}},
                    },
                )
    return result
