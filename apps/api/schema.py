"""OpenAPI post-processing: every operation documents the problem+json errors it can answer."""

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
