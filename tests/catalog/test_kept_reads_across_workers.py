"""The catalog's kept reads across web processes, as deployed: two gunicorn processes share
Redis and PostgreSQL, and a change made in another process (here: the test's own, as a Celery
worker or a third web process would) shows at once in both, on the API's list of flavors and on
a visitor's page."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.core.cache import cache
from django.db import connection, transaction

from apps.catalog.models import PriceKind
from apps.catalog.services import schedule_price, set_flavor_on_sale
from apps.orchestration.services import place, register_node, shape_of
from apps.tenants.services import create_api_key
from tests.catalog.test_kept_reads import cards_on
from tests.factories import (
    FlavorFactory,
    FlavorFamilyFactory,
    InstanceFactory,
    OrderFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)
from tests.redis_server import require_redis

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/14"
CODE = "k1.1x"


@pytest.fixture
def shared_cache(settings):
    """The test's own process writes to the Redis the web processes read (in CI too)."""
    require_redis(REDIS_URL)
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "loam",  # as portal/settings.py names every process's keys
        }
    }
    cache.clear()
    yield
    cache.clear()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def two_workers(shared_cache):
    """Two gunicorn processes on the test database and the shared Redis: [base URL, …]."""
    database = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        ),
        "CACHE_URL": REDIS_URL,
        "DEBUG": "true",  # static files without a collectstatic manifest
        "LOAM_DEMO": "true",
        "ALLOWED_HOSTS": "127.0.0.1",
        "CELERY_BROKER_URL": "memory://",
        "DATABASE_CONN_MAX_AGE": "0",
    }
    if database.get("PASSWORD"):
        env["PGPASSWORD"] = database["PASSWORD"]
    servers, bases = [], []
    try:
        for _ in range(2):
            port = free_port()
            command = [sys.executable, "-m", "gunicorn", "portal.wsgi:application"]
            servers.append(
                subprocess.Popen(
                    [*command, "--bind", f"127.0.0.1:{port}", "--workers", "1"],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            bases.append(f"http://127.0.0.1:{port}")
        for base in bases:
            wait_until_up(base)
        yield bases
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)


def wait_until_up(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"gunicorn at {base} did not answer within 60 s")


@pytest.fixture
def sold(park, organization, owner):
    region = RegionFactory(park=park)
    pool = PoolFactory(backend__park=park, backend__driver="simulator", region=region)
    family = FlavorFamilyFactory(park=park, accelerator_model=pool.accelerator_model)
    flavor = FlavorFactory(family=family, code=CODE, accelerator_count=1, vcpu=1, ram_gb=1)
    PriceFactory(region=region, flavor=flavor, amount_minor=2500)
    register_node(pool=pool, hostname="node-0", accelerators=2, vcpu=64, ram_gb=256)
    _key, secret = create_api_key(organization=organization, actor=owner, name="r", scope="read")
    return region, flavor, secret


def seen_by_each(bases, secret) -> list[dict]:
    """What each worker's API list and visitor page say, twice each (the second one kept)."""
    seen = []
    for base in bases:
        for _ in range(2):
            api = httpx.get(
                f"{base}/api/v1/flavors/", headers={"Authorization": f"Bearer {secret}"}
            )
            assert api.status_code == 200, api.text
            seen.append(
                {
                    c["flavor"]["code"]: (c["available_now"], c["cheapest_hourly_minor"])
                    for c in api.json()
                }
            )
            page = httpx.get(f"{base}/catalog/", cookies={"django_language": "en"})
            assert page.status_code == 200
            seen.append(cards_on(page.text))
    return seen


def test_a_change_made_elsewhere_shows_at_once_in_both_workers(
    two_workers, sold, operator, organization
):
    region, flavor, secret = sold
    assert seen_by_each(two_workers, secret) == [{CODE: (2, 2500)}] * 8

    schedule_price(
        region=region,
        operator=operator,
        kind=PriceKind.FLAVOR_HOUR,
        flavor=flavor,
        amount_minor=3100,
    )
    assert seen_by_each(two_workers, secret) == [{CODE: (2, 3100)}] * 8

    for _ in range(2):  # the last card
        instance = InstanceFactory(organization=organization, flavor=flavor)
        OrderFactory(organization=organization, instance=instance)
        with transaction.atomic():
            place(instance=instance, shape=shape_of(flavor))
    assert seen_by_each(two_workers, secret) == [{CODE: (0, 3100)}] * 8

    set_flavor_on_sale(flavor=flavor, operator=operator, on_sale=False)
    assert seen_by_each(two_workers, secret) == [{}] * 8
