from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def development_secret_key(app_configs, **kwargs):
    if settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
        return [
            Error(
                "SECRET_KEY is the development default.",
                hint="Set SECRET_KEY in the environment to a long random value.",
                id="loam.E001",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def shared_cache(app_configs, **kwargs):
    """Login rate limits count in the cache: a per-process cache lets each worker count alone
    (19 of 30 wrong passwords were checked against a limit of 5). The catalog's free room is
    kept there too: a worker would not see another's placements for a few seconds."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend.endswith("LocMemCache"):
        return [
            Warning(
                "The cache is per process, so login rate limits are counted per worker and "
                "the catalog's free hosts lag placements made by other workers.",
                hint="Set CACHE_URL (e.g. redis://127.0.0.1:6379/1) to a shared cache.",
                id="loam.W001",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def demo_park(app_configs, **kwargs):
    """A demo park offers the simulator: tenants could order and pay for hosts that do not
    exist."""
    if settings.LOAM_DEMO:
        return [
            Warning(
                "LOAM_DEMO is on: the simulator is offered, and its hosts do not exist.",
                hint="Leave LOAM_DEMO unset (off) unless this park is a demo.",
                id="loam.W002",
            )
        ]
    return []
