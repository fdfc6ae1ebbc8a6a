"""The local Redis that the cache tests write to. Where none answers they are skipped, except in
CI (LOAM_REQUIRE_SERVICES=1), where that is a failure: CI must not pass by skipping them."""

import os

import pytest


def require_redis(url: str) -> None:
    """Skip the test (fail it in CI) unless the Redis at `url` answers."""
    import redis

    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError:
        if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"LOAM_REQUIRE_SERVICES=1 but no Redis answers at {url}")
        pytest.skip(f"no Redis answers at {url}")
