"""The driver protocol every backend implements (DESIGN.md, Backends)."""

from dataclasses import dataclass, field
from typing import Protocol


class BackendError(Exception):
    """A backend refused or failed. `transient` errors are retried with backoff."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class NodeCapacity:
    hostname: str
    accelerators: int
    vcpu: int
    ram_gb: int
    healthy: bool = True
    telemetry: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    accelerator_model: str
    nodes: tuple[NodeCapacity, ...]


class Driver(Protocol):
    """Constructed with a Backend row's config; methods take primary keys or plain values."""

    name: str
    is_simulator: bool

    def capacity(self) -> list[PoolCapacity]: ...
