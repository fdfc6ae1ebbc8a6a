import re

import pytest


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
def test_api_docs_load_only_local_assets(client, path):
    html = client.get(path).content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css|png))"', html)
    assert assets, html[:500]
    assert all(asset.startswith("/static/vendor/") for asset in assets), assets


@pytest.mark.django_db
def test_schema_names_every_v1_route(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in (
        "/api/v1/quotes/",
        "/api/v1/orders/",
        "/api/v1/instances/{id}/resize/",
        "/api/v1/webhooks/",
        "/api/v1/operator/orders/{id}/approve/",
    ):
        assert path in schema["paths"]
    assert "Problem" in schema["components"]["schemas"]
