"""A simulated backend for demos and tests. Everything it reports is labelled as simulated.

Config (all optional):
    latency_seconds: [min, max]   time each call takes (uniform), default [0, 0]
    failure_rate: 0.0..1.0        share of calls that fail permanently
    transient_failure_rate: 0..1  share of calls that fail transiently (the task retries them)
    seed: int                     makes the random draws reproducible
    pools: [...]                  the capacity it reports (see `capacity`)

Tests inject failures precisely with `SimulatorDriver.fail_next(...)`.
"""

import hashlib
import random
import threading
import time
from collections import deque

from apps.orchestration.backends.base import (
    BackendError,
    HostAccess,
    HostSpec,
    NodeCapacity,
    PoolCapacity,
)
from apps.orchestration.backends.registry import register

_injected: deque = deque()
_injected_lock = threading.Lock()
# One random stream per seed for the whole process: drivers are built per call, and a fresh
# Random(seed) each time would draw the same first number forever (all calls fail, or none).
_streams: dict = {}


@register
class SimulatorDriver:
    name = "simulator"
    is_simulator = True

    def __init__(self, config: dict):
        self.config = config or {}
        seed = self.config.get("seed")
        with _injected_lock:
            self._random = _streams.setdefault(seed, random.Random(seed))

    # --- failure injection (tests) -------------------------------------------------------------

    @staticmethod
    def fail_next(*errors: BackendError) -> None:
        """The next calls (any instance of the driver, in this process) raise these errors."""
        with _injected_lock:
            _injected.extend(errors)

    @staticmethod
    def clear_injected() -> None:
        with _injected_lock:
            _injected.clear()

    def _call(self, operation: str) -> None:
        with _injected_lock:
            injected = _injected.popleft() if _injected else None
        if injected is not None:
            raise injected
        low, high = self.config.get("latency_seconds", [0, 0])
        if high:
            time.sleep(self._random.uniform(low, high))
        draw = self._random.random()
        failure = float(self.config.get("failure_rate", 0))
        transient = float(self.config.get("transient_failure_rate", 0))
        if draw < failure:
            raise BackendError(f"simulator: {operation} failed (simulated hardware fault)")
        if draw < failure + transient:
            raise BackendError(f"simulator: {operation} timed out (simulated)", transient=True)

    # --- the driver protocol -------------------------------------------------------------------

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

    def provision(self, spec: HostSpec) -> HostAccess:
        self._call("provision")
        digest = hashlib.sha256(f"{spec.node}/{spec.name}".encode()).digest()
        # A stable address in the benchmarking range (RFC 2544): nothing answers there.
        address = f"198.18.{digest[0]}.{digest[1] or 1}"
        return HostAccess(handle=f"sim-{digest.hex()[:12]}", address=address)

    def stop(self, handle: str) -> None:
        self._call("stop")

    def start(self, handle: str) -> None:
        self._call("start")

    def resize(self, handle: str, spec: HostSpec) -> None:
        self._call("resize")

    def set_disk(self, handle: str, data_disk_gb: int) -> None:
        self._call("set_disk")

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> None:
        self._call("set_bandwidth")

    def release(self, handle: str) -> None:
        self._call("release")

    def status(self, handle: str) -> str:
        return "running"
