import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    """Tests marked `postgres` need real row locks and concurrent connections."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(
        reason="needs PostgreSQL (row locks, real concurrency); set DATABASE_URL to run it"
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _plain_static_storage(settings):
    """Tests render templates without a collectstatic manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
