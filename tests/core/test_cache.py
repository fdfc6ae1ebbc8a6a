"""The Redis cache keeps one client per connection pool, where Django's builds one for every
cache call; what it stores and reads is Django's."""

import pytest
from django.core.cache.backends.redis import RedisCache as DjangoRedisCache

from apps.core.cache import RedisCache
from tests.redis_server import require_redis

LOCATION = "redis://127.0.0.1:6379/14"


@pytest.fixture
def cache():
    require_redis(LOCATION)
    cache = RedisCache(LOCATION, {"KEY_PREFIX": "loam-test-cache"})
    yield cache
    cache.clear()


def test_every_call_uses_the_same_client(cache):
    cache.set("a", 1)
    assert cache.get("a") == 1 and cache.get_many(["a", "b"]) == {"a": 1}
    assert cache.incr("a") == 2
    assert cache._cache.get_client(write=True) is cache._cache.get_client(write=False)
    assert len(cache._cache._clients) == 1


def test_djangos_own_client_builds_one_a_call():
    """What the class is for: were Django's client ever to keep its clients, it could go."""
    django_cache = DjangoRedisCache(LOCATION, {})
    client = django_cache._cache
    assert client.get_client() is not client.get_client()


def test_what_one_writes_the_other_reads(cache):
    django_cache = DjangoRedisCache(LOCATION, {"KEY_PREFIX": "loam-test-cache"})
    cache.set("shared", {"cards": 8})
    assert django_cache.get("shared") == {"cards": 8}
