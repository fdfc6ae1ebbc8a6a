import re
from io import StringIO

import pytest
from django.core.management import call_command

from apps.operations import demo

pytestmark = pytest.mark.django_db

LANGUAGE_MARKERS = {
    # a string from the base layout in each language
    "en": ["Catalog", "Log in"],
    "zh-hans": ["目录", "登录"],
}


@pytest.fixture
def demo_park():
    call_command("seed_demo", stdout=StringIO())


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize("path", ["/", "/catalog/", "/accounts/login/", "/accounts/signup/"])
def test_public_pages_render_in_both_languages(client, demo_park, path, language):
    client.cookies["django_language"] = language
    response = client.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    assert f'<html lang="{language}">' in html
    for marker in LANGUAGE_MARKERS[language]:
        assert marker in html
    assert "/static/vendor/htmx/htmx.min.js" in html
    # Nothing is loaded from another host (production parks have no internet).
    assert not re.findall(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//', html)


def test_default_language_is_simplified_chinese(client, demo_park):
    html = client.get("/").content.decode()
    assert '<html lang="zh-hans">' in html


def test_language_switcher_sets_the_language(client, demo_park):
    response = client.post("/i18n/setlang/", {"language": "en", "next": "/catalog/"})
    assert response.status_code == 302
    assert response["Location"] == "/catalog/"
    assert '<html lang="en">' in client.get("/catalog/").content.decode()


def test_catalog_shows_prices_and_free_capacity(client, demo_park):
    client.cookies["django_language"] = "en"
    html = client.get("/catalog/").content.decode()
    assert "h200.8x" in html
    assert "¥304.00" in html  # 8 cards × ¥38/h in the center
    assert "per second" in html


def test_catalog_filters_by_vendor_and_answers_htmx_with_the_fragment(client, demo_park):
    response = client.get("/catalog/?vendor=huawei", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html
    assert "ascend910b.1x" in html
    assert "h200.1x" not in html


def test_catalog_domestic_only(client, demo_park):
    html = client.get("/catalog/?domestic=1").content.decode()
    assert "k100ai.1x" in html and "mlu370x8.8x" in html
    assert "a100.1x" not in html and "l40s.1x" not in html


def test_unknown_vendor_filter_is_ignored_not_an_error(client, demo_park):
    response = client.get("/catalog/?vendor=%3Cscript%3E")
    assert response.status_code == 200
    assert "h200.1x" in response.content.decode()


def test_operator_overview_needs_an_operator(client, demo_park):
    assert client.get("/ops/").status_code == 302  # to the login page
    client.login(username=demo.OWNER["email"], password=demo.OWNER["password"])
    assert client.get("/ops/").status_code == 403
    client.logout()
    client.login(username=demo.OPERATOR["email"], password=demo.OPERATOR["password"])
    client.cookies["django_language"] = "en"
    response = client.get("/ops/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "sh-center-h200" in html and "Simulator" in html


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_admin_renders(client, demo_park, language):
    client.login(username=demo.PLATFORM_ADMIN["email"], password=demo.PLATFORM_ADMIN["password"])
    client.cookies["django_language"] = language
    assert client.get("/admin/").status_code == 200
    for path in (
        "/admin/orders/instance/",
        "/admin/catalog/flavor/",
        "/admin/tenants/organization/",
        "/admin/orchestration/node/",
        "/admin/core/auditevent/",
        "/admin/orders/securitygroup/",
        "/admin/agents/agenthost/",
    ):
        assert client.get(path).status_code == 200, path


def test_sign_in_lands_where_the_user_works(client, organization, owner, operator):
    from tests.factories import UserFactory

    client.force_login(owner)
    assert client.get("/start/")["Location"] == "/"  # the console home
    client.force_login(operator)
    assert client.get("/start/")["Location"] == "/ops/"
    client.force_login(UserFactory())
    assert client.get("/start/")["Location"] == "/org/new/"
