"""Django's Redis cache, keeping one `redis.Redis` client per connection pool.

Django's client builds a new `redis.Redis` for every cache operation, and redis-py fills a
dict of about 170 response callbacks for each one: a quarter of the Python time of a cached API
read (`GET /api/v1/flavors/` makes three cache calls). redis-py's clients are safe to share
between threads; they take a connection from the pool for each command, as before.
"""

from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}  # by the id of their pool, which self._pools keeps for good

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient
