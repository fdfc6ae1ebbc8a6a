"""The production profile's static build: collectstatic with the hashed manifest (what DEBUG=false
serves) succeeds, and the pages render against it with the branded error pages."""

import pytest
from django.core.management import call_command
from django.test import RequestFactory, override_settings

from apps.core.views import server_error

MANIFEST = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}


@pytest.fixture(scope="module")
def built_static(tmp_path_factory):
    root = tmp_path_factory.mktemp("staticfiles")
    # A reference to a file that is not vendored (a source map, a font) fails right here.
    with override_settings(STATIC_ROOT=root, STORAGES=MANIFEST):
        call_command("collectstatic", interactive=False, verbosity=0)
    return root


@pytest.fixture
def production_static(settings, built_static):
    settings.STATIC_ROOT = built_static
    settings.STORAGES = {**settings.STORAGES, "staticfiles": MANIFEST["staticfiles"]}
    settings.DEBUG = False
    return built_static


def test_collectstatic_writes_a_manifest_with_hashed_names(built_static):
    assert (built_static / "staticfiles.json").exists()
    assert list(built_static.glob("css/loam.*.css"))
    assert list(built_static.glob("favicon.*.svg"))


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path", ["/", "/catalog/", "/accounts/login/", "/api/docs/", "/api/redoc/"]
)
def test_pages_link_hashed_static_files(client, production_static, path):
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    if path not in ("/api/docs/", "/api/redoc/"):
        assert "/static/css/loam." in html and "/static/css/loam.css" not in html
        assert '<link rel="icon" href="/static/favicon.' in html


@pytest.mark.django_db
def test_unknown_page_is_the_branded_404(client, production_static):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "404" in html and "Loam" in html and "/static/css/loam." in html
    assert "Page not found" in html or "页面不存在" in html


def test_server_error_page_renders_without_a_request_context(production_static):
    response = server_error(RequestFactory().get("/orders/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "500" in html and "Loam" in html and "/static/favicon." in html


def test_api_server_error_stays_json(production_static):
    response = server_error(RequestFactory().get("/api/v1/orders/"))
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"


@pytest.mark.django_db
def test_favicon_ico_redirects_to_the_static_icon(client, production_static):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].startswith("/static/favicon.")
