"""Issue 18: the cache the login rate limits count in is shared (Redis) when configured, and the
embedded SQLite database lets several processes write without "database is locked"."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.redis_server import require_redis

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("CACHE_URL", "REDIS_URL", "DATABASE_URL", "SQLITE_BUSY_TIMEOUT_S")


def run(script: str, **overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", **overrides)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


CACHE_PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps(settings.CACHES["default"]))
"""


def test_the_local_default_is_memory():
    assert run(CACHE_PROBE)["BACKEND"] == "django.core.cache.backends.locmem.LocMemCache"


@pytest.mark.parametrize("name", ["REDIS_URL", "CACHE_URL"])
def test_a_redis_url_shares_the_cache_between_processes(name):
    cache = run(CACHE_PROBE, **{name: "redis://127.0.0.1:6379/1"})
    assert cache["BACKEND"] == "apps.core.cache.RedisCache"  # Django's, a client per pool
    assert cache["LOCATION"] == "redis://127.0.0.1:6379/1"


def test_cache_url_wins_over_redis_url():
    cache = run(CACHE_PROBE, CACHE_URL="redis://127.0.0.1:6379/2", REDIS_URL="redis://x:1/0")
    assert cache["LOCATION"] == "redis://127.0.0.1:6379/2"


def test_failed_logins_count_across_processes_in_redis():
    """Two interpreters (two web workers) fail a login five times between them: with the
    shared cache the email is locked in both; each process alone would have allowed it."""
    require_redis("redis://127.0.0.1:6379/15")
    script = """
    import json, django
    from django.conf import settings
    django.setup()
    from django.test import RequestFactory
    from django.contrib.sessions.middleware import SessionMiddleware
    from allauth.core.internal import ratelimit
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="10.9.8.7")
    SessionMiddleware(lambda r: None).process_request(request)
    if CLEAR:
        from django.core.cache import cache
        cache.clear()
    allowed = [
        bool(ratelimit.consume(
            request, app="allauth.account", action="login_failed", key="x:victim@example.com"
        ))
        for _ in range(3)
    ]
    print(json.dumps(allowed))
    """
    url = {"CACHE_URL": "redis://127.0.0.1:6379/15"}
    first = run(script.replace("CLEAR", "True"), **url)
    second = run(script.replace("CLEAR", "False"), **url)
    assert first == [True, True, True]
    assert second == [True, True, False]  # 5 per 5 minutes per email, counted once


SQLITE_PROBE = """
import json, sys, threading, time, django
from django.conf import settings
django.setup()
from django.db.backends.sqlite3.base import DatabaseWrapper
from django.db import OperationalError

path = sys.argv[1] if len(sys.argv) > 1 else None
config = {**settings.DATABASES["default"], "NAME": "%(path)s"}
setup = DatabaseWrapper(config, alias="probe")
with setup.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    cursor.execute("PRAGMA journal_mode")
    mode = cursor.fetchone()[0]
    cursor.execute("PRAGMA busy_timeout")
    busy = cursor.fetchone()[0]
setup.close()

errors = []
def writer(n):
    # Read, then write, in one transaction: a probe_backends or run_task job does this.
    wrapper = DatabaseWrapper(config, alias=f"w{n}")
    try:
        for _ in range(5):
            with wrapper.cursor():
                pass
            wrapper.set_autocommit(False)
            cursor = wrapper.cursor()
            cursor.execute("SELECT COUNT(*) FROM t")
            time.sleep(0.02)
            cursor.execute("INSERT INTO t VALUES (%%s)", [n])
            wrapper.commit()
            wrapper.set_autocommit(True)
    except OperationalError as error:
        errors.append(str(error))
    finally:
        wrapper.close()

threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(json.dumps({
    "mode": mode, "busy_ms": busy, "errors": errors,
    "transaction_mode": settings.DATABASES["default"]["OPTIONS"].get("transaction_mode"),
}))
"""


def test_the_embedded_sqlite_database_does_not_wedge(tmp_path):
    probe = run(SQLITE_PROBE % {"path": tmp_path / "loam.sqlite3"})
    assert probe["mode"] == "wal"
    assert probe["busy_ms"] >= 20_000
    assert probe["transaction_mode"] == "IMMEDIATE"
    assert probe["errors"] == []
