"""In CI (`LOAM_REQUIRE_SERVICES=1`, set by .ci/run) the suite must really run on PostgreSQL and
the broker; without this, a misconfigured CI would pass on the embedded defaults."""

import os

import pytest
from django.db import connection

from apps.core.health import broker_status

pytestmark = pytest.mark.skipif(
    os.environ.get("LOAM_REQUIRE_SERVICES") != "1", reason="only in CI (.ci/run)"
)


@pytest.mark.django_db
def test_runs_on_postgresql():
    assert connection.vendor == "postgresql"


def test_broker_is_a_real_server_and_reachable():
    status = broker_status()
    assert status["ok"], status
    assert status["transport"] != "filesystem"
