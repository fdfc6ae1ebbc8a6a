"""A simulated backend for demos and tests. Everything it reports is labelled as simulated."""

from apps.orchestration.backends.base import BackendError, NodeCapacity, PoolCapacity
from apps.orchestration.backends.registry import register


@register
class SimulatorDriver:
    """Config: {"pools": [{"name", "accelerator_model", "nodes": [{"hostname", "accelerators",
    "vcpu", "ram_gb"}]}]}, the capacity it pretends to have."""

    name = "simulator"
    is_simulator = True

    def __init__(self, config: dict):
        self.config = config

    def capacity(self) -> list[PoolCapacity]:
        try:
            return [
                PoolCapacity(
                    name=pool["name"],
                    accelerator_model=pool["accelerator_model"],
                    nodes=tuple(
                        NodeCapacity(
                            hostname=node["hostname"],
                            accelerators=int(node["accelerators"]),
                            vcpu=int(node["vcpu"]),
                            ram_gb=int(node["ram_gb"]),
                            telemetry={"simulated": True},
                        )
                        for node in pool["nodes"]
                    ),
                )
                for pool in self.config.get("pools", [])
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"Simulator config is invalid: {exc!r}") from exc
