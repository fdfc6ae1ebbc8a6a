"""JSON nested deeper than any API payload is a 400 problem, not a RecursionError (a 500), on
every API route, the unauthenticated agent enrolment included."""

import pytest

from apps.api.parsers import MAX_JSON_DEPTH, json_depth_exceeds

pytestmark = pytest.mark.django_db

DEEP = [
    "[" * 2_000 + "]" * 2_000,
    '{"a":' * 100_000 + "0" + "}" * 100_000,
    "[" * 100_000,  # never closed
]


@pytest.mark.parametrize("body", DEEP, ids=["arrays", "objects", "unclosed"])
@pytest.mark.parametrize("path", ["/api/v1/agent/enrol", "/api/v1/orders/"])
def test_deep_json_is_a_400_problem(client, owner, path, body):
    client.force_login(owner)

    response = client.post(path, body, content_type="application/json", HTTP_ACCEPT_LANGUAGE="en")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/problem+json")
    assert f"{MAX_JSON_DEPTH} levels" in response.json()["detail"]


def test_json_within_the_limit_is_parsed_as_before(client):
    nested = {"join_token": "loamjt_x", "server": [[[[{"a": "[{"}]]]]}

    response = client.post("/api/v1/agent/enrol", nested, content_type="application/json")
    refused_constant = client.post(
        "/api/v1/agent/enrol", '{"join_token": NaN}', content_type="application/json"
    )

    assert response.status_code == 400 and "server.non_field_errors" in response.json()["errors"]
    assert refused_constant.status_code == 400
    assert "JSON parse error" in refused_constant.json()["detail"]


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
        ("[]" * 1_000, False),  # wide is not deep
        ('["' + "[" * 1_000 + '"]', False),  # brackets inside a string do not count
        ('["\\"' + "{" * 1_000 + '"]', False),  # nor after an escaped quote
        ('["\\\\", ' + "[" * 100 + "]" * 100 + "]", True),  # an escaped backslash ends nothing
    ],
)
def test_depth_is_counted_outside_strings(text, too_deep):
    assert json_depth_exceeds(text) is too_deep
