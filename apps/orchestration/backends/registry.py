"""Driver registry: a Backend row names its driver; nothing outside orchestration imports one.

The drivers a deployment offers are the dotted paths in `settings.LOAM_BACKEND_DRIVERS`, loaded
by the orchestration app's `ready()`; a simulator among them only where `settings.LOAM_DEMO`
says the park is a demo. Elsewhere it is as if unknown: not offered to register, its backends
refused (`BackendError`) and their nodes never scheduled.
"""

from django.conf import settings
from django.utils.module_loading import import_string

from apps.orchestration.backends.base import BackendError, Capability, Driver

_DRIVERS: dict[str, type] = {}


def load_drivers(paths) -> None:
    """Register the driver classes named by `paths` (dotted, e.g. "pkg.module.Driver")."""
    for path in paths:
        register(import_string(path))


def register(driver_class: type) -> type:
    capabilities = frozenset(getattr(driver_class, "capabilities", ()))
    if Capability.INVENTORY not in capabilities or not capabilities <= set(Capability):
        raise TypeError(
            f"{driver_class.__qualname__} must declare `capabilities` from Capability, "
            "INVENTORY among them"
        )
    _DRIVERS[driver_class.name] = driver_class
    return driver_class


def _offered() -> dict[str, type]:
    if settings.LOAM_DEMO:
        return _DRIVERS
    return {name: driver for name, driver in _DRIVERS.items() if not driver.is_simulator}


def driver_names() -> list[str]:
    return sorted(_offered())


def driver_class(name: str) -> type:
    offered = _offered()
    if name in offered:
        return offered[name]
    if name in _DRIVERS:
        raise BackendError(
            f"The {name} driver simulates hosts and runs only in a demo park (LOAM_DEMO)."
        )
    raise BackendError(f"No backend driver named {name!r}; known: {', '.join(sorted(offered))}")


def get_driver(name: str, config: dict) -> Driver:
    return driver_class(name)(config)


def driver_of(backend) -> Driver:
    """The driver of a Backend row, built with its config. A driver whose state lives in the
    portal itself (`binds_backend = True`: the host agent's, whose servers poll the portal) is
    also told which row it serves, as `config["backend_id"]`."""
    config = backend.config
    if getattr(driver_class(backend.driver), "binds_backend", False):
        config = {**(config or {}), "backend_id": backend.pk}
    return get_driver(backend.driver, config)


def endpoint_of(name: str, config) -> str | None:
    """The outside system a backend's config reaches, as its driver names it (`endpoint`, see
    Driver); None for a driver that names none (the simulator's and the agent's backends are
    the portal's own). Offered or not: a registered row keeps its endpoint. ValueError for a
    config whose endpoint the driver cannot read."""
    driver = _DRIVERS.get(name)
    endpoint = getattr(driver, "endpoint", None)
    return endpoint(config) if endpoint is not None and isinstance(config, dict) else None


def supports(name: str, capability: Capability) -> bool:
    driver = _offered().get(name)
    return driver is not None and capability in driver.capabilities


def drivers_with(capability: Capability) -> list[str]:
    return sorted(name for name, driver in _offered().items() if capability in driver.capabilities)


def config_examples() -> dict[str, dict]:
    """{driver name: an example of its config}, for the operator registering a backend."""
    return {
        name: getattr(driver, "config_example", {}) for name, driver in sorted(_offered().items())
    }


def is_simulator(name: str) -> bool:
    driver = _DRIVERS.get(name)
    return bool(driver and driver.is_simulator)
