"""The Content-Security-Policy header (apps.core.csp, issue 18): on every page, scripts from
this site only (inline ones only with the request's nonce), and the pages that use HTMX,
ECharts, Bootstrap, Swagger UI and ReDoc still render under it."""

import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def directives(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    parsed = {}
    for part in header.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/accounts/login/", "/healthz", "/api/schema/"])
def test_every_response_has_the_policy(client, path):
    response = client.get(path)
    policy = directives(response)
    assert policy["default-src"] == ["'self'"]
    assert "'unsafe-inline'" not in policy["script-src"]
    assert "'unsafe-eval'" not in policy["script-src"]
    assert policy["script-src"][0] == "'self'"
    assert policy["frame-ancestors"] == ["'self'"] and policy["base-uri"] == ["'self'"]


@pytest.mark.django_db
def test_each_request_gets_its_own_nonce(client):
    first, second = (directives(client.get("/"))["script-src"][1] for _ in range(2))
    assert re.fullmatch(r"'nonce-[\w-]{16,}'", first)
    assert first != second


@pytest.mark.django_db
def test_the_swagger_page_renders_with_its_script_under_the_nonce(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    nonce = directives(response)["script-src"][1].removeprefix("'nonce-").removesuffix("'")
    assert "/static/vendor/swagger-ui/swagger-ui-bundle.js" in html
    inline = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    bodies = [(attrs, body) for attrs, body in inline if body.strip()]
    assert bodies, "the Swagger UI init script"
    for attrs, _body in bodies:
        assert f'nonce="{nonce}"' in attrs
    assert "SwaggerUIBundle" in "".join(body for _attrs, body in bodies)


@pytest.mark.django_db
def test_the_redoc_page_renders_without_outside_resources(client):
    response = client.get("/api/redoc/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/vendor/redoc/bundles/redoc.standalone.js" in html
    assert "googleapis" not in html and "https://" not in html
    assert "blob:" in directives(response)["worker-src"]


@pytest.mark.django_db
def test_the_policy_can_be_report_only(client, settings):
    settings.LOAM_CSP_REPORT_ONLY = True
    response = client.get("/")
    assert "Content-Security-Policy" not in response
    assert "script-src 'self'" in response["Content-Security-Policy-Report-Only"]


def test_no_template_has_inline_script_or_event_handlers():
    """Inline JavaScript would be blocked: behaviour lives in static/js (data-confirm,
    data-autosubmit, data-disable-on-submit, data-print), data in json_script payloads."""
    offenders = []
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"<script\b([^>]*)>", text):
            attrs = match.group(1)
            if "src=" not in attrs and "nonce=" not in attrs:
                offenders.append(f"{path.relative_to(TEMPLATES)}: <script{attrs}>")
        for match in re.finditer(r"\son[a-z]+\s*=\s*[\"']", text):
            offenders.append(f"{path.relative_to(TEMPLATES)}: {match.group(0).strip()}")
        if "javascript:" in text:
            offenders.append(f"{path.relative_to(TEMPLATES)}: javascript: URL")
    assert offenders == []
