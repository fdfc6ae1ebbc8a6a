"""Every registered driver implements the protocol of each capability it declares, with the
protocol's parameter names (the jobs call them by keyword and position alike)."""

import inspect

import pytest

from apps.orchestration.backends import registry
from apps.orchestration.backends.base import (
    BatchDriver,
    Capability,
    HostDriver,
    InventoryDriver,
    MetricsDriver,
    NetworkDriver,
    SharedFsDriver,
    TerminalDriver,
)

PROTOCOLS = {
    Capability.INVENTORY: InventoryDriver,
    Capability.HOSTS: HostDriver,
    Capability.BATCH: BatchDriver,
    Capability.NETWORK: NetworkDriver,
    Capability.METRICS: MetricsDriver,
    Capability.GANG: BatchDriver,
    Capability.TERMINAL: TerminalDriver,
    Capability.SHARED_FS: SharedFsDriver,
}


def protocol_methods(protocol) -> dict:
    return {
        name: member
        for name, member in vars(protocol).items()
        if inspect.isfunction(member) and not name.startswith("_")
    }


def parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", registry.driver_names())
def test_a_driver_has_every_method_of_its_capabilities(name):
    driver = registry.driver_class(name)
    for capability in driver.capabilities:
        for method, declared in protocol_methods(PROTOCOLS[capability]).items():
            implemented = getattr(driver, method, None)
            assert callable(implemented), f"{name} lacks {method} ({capability})"
            assert parameters(implemented) == parameters(declared), f"{name}.{method}"
