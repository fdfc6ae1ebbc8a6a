"""Driver registry: a Backend row names its driver; nothing outside orchestration imports one."""

from apps.orchestration.backends.base import BackendError, Driver

_DRIVERS: dict[str, type] = {}


def register(driver_class: type) -> type:
    _DRIVERS[driver_class.name] = driver_class
    return driver_class


def driver_names() -> list[str]:
    _load_builtin()
    return sorted(_DRIVERS)


def get_driver(name: str, config: dict) -> Driver:
    _load_builtin()
    try:
        driver_class = _DRIVERS[name]
    except KeyError:
        known = ", ".join(sorted(_DRIVERS))
        raise BackendError(f"No backend driver named {name!r}; known: {known}") from None
    return driver_class(config)


def _load_builtin():
    from apps.orchestration.backends import simulator  # noqa: F401
