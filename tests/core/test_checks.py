"""`check --deploy` warns when login rate limits would be counted per process."""

from django.core.checks import Warning

from apps.core.checks import shared_cache


def test_a_per_process_cache_is_flagged_for_deployment(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    [warning] = shared_cache(None)
    assert isinstance(warning, Warning) and warning.id == "loam.W001"


def test_a_shared_cache_passes(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache"}}
    assert shared_cache(None) == []
