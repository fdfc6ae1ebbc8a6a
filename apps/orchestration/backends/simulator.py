"""A simulated backend for demos and tests. Everything it reports is labelled as simulated.

Config (all optional):
    latency_seconds: [min, max]   how long a host request (provision, stop, start, resize, disk,
                                  bandwidth, release) takes to complete, drawn uniformly per
                                  request, default [0, 0]; the call itself returns at once
    failure_rate: 0.0..1.0        share of calls that fail permanently (a host request is
                                  accepted and fails when it completes)
    transient_failure_rate: 0..1  share of calls that fail transiently (the job retries them)
    seed: int                     makes the random draws reproducible
    pools: [...]                  the capacity it reports (see `capacity`)
    utilization: {host: {index: pct}}  the utilization `telemetry` reports for those devices
                                  (held or not), and the hosts holding them
    idle_share: 0.0..1.0          share of the other held devices reported idle (default 0.2);
                                  the choice is stable per device (seed, host, index), so an
                                  idle device stays idle from one reading to the next; a device
                                  nothing holds reads 0 % (`simulated_load` has the model)
    unhealthy: [host, ...]        hosts reported unhealthy
    task_seconds: float           how long a training task runs (default 0: done at the first poll)
    task_failure_rate: 0.0..1.0   share of training tasks that exit with an error; which ones is
                                  a stable draw per task (seed, node, name, command)
    tasks: {name: {"seconds": s, "exit_code": n}}  scripted runs: how long the training task of
                                  that name runs and how it exits (the demo's history), instead
                                  of task_seconds and the draw

It keeps time by the portal's clock (django.utils.timezone.now), as the rest of the portal does:
whatever runs the portal at another moment (a test's frozen clock, the demo's history written
at past moments) runs its simulated backend there too.

Its hosts' figures (`host_metrics`: GPU, CPU, memory, disk, network) come from the same model as
its nodes' telemetry, so a host's GPU utilization is the mean of what its cards read there.

Its hosts' networks (`set_network`) are simulated too: a host's forwarded ports are the same
ports of its own made-up address, and nothing refuses them (nor takes an injected failure).

Tests inject failures precisely with `SimulatorDriver.fail_next(...)`.
"""

import hashlib
import random
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from apps.orchestration.backends.base import (
    PURPOSE_MAPPING,
    PURPOSE_SSH,
    SSH_PORT,
    TASK_FAILED,
    TASK_RUNNING,
    TASK_SUCCEEDED,
    AcceleratorReading,
    BackendError,
    Capability,
    ForwardedPort,
    HostAccess,
    HostLoad,
    HostMetrics,
    HostNetwork,
    HostPorts,
    HostRequestStatus,
    HostSpec,
    NodeCapacity,
    NodeTelemetry,
    ReportedPool,
    TaskSpec,
    TaskStatus,
)
from apps.orchestration.backends.simulated_load import LoadModel

_injected: deque = deque()
_injected_lock = threading.Lock()
# One random stream per seed for the whole process: drivers are built per call, and a fresh
# Random(seed) each time would draw the same first number forever (all calls fail, or none).
_streams: dict = {}


def _now() -> float:
    """The portal's clock, in epoch seconds."""
    return timezone.now().timestamp()


class SimulatorDriver:
    name = "simulator"
    is_simulator = True
    capabilities = frozenset(
        {
            Capability.INVENTORY,
            Capability.HOSTS,
            Capability.BATCH,
            Capability.GANG,
            Capability.NETWORK,
            Capability.METRICS,
        }
    )
    config_example = {
        "pools": [
            {
                "name": "sim-h200",
                "accelerator_model": "h200-sxm",
                "nodes": [{"hostname": "sim-1", "accelerators": 8, "vcpu": 128, "ram_gb": 1024}],
            }
        ]
    }

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

    @staticmethod
    def _raise_injected() -> None:
        with _injected_lock:
            injected = _injected.popleft() if _injected else None
        if injected is not None:
            raise injected

    def _drawn_failure(self, operation: str) -> BackendError | None:
        draw = self._random.random()
        failure = float(self.config.get("failure_rate", 0))
        transient = float(self.config.get("transient_failure_rate", 0))
        if draw < failure:
            return BackendError(f"simulator: {operation} failed (simulated hardware fault)")
        if draw < failure + transient:
            return BackendError(f"simulator: {operation} timed out (simulated)", transient=True)
        return None

    def _call(self, operation: str) -> None:
        self._raise_injected()
        failure = self._drawn_failure(operation)
        if failure is not None:
            raise failure

    # --- the driver protocol -------------------------------------------------------------------

    def capacity(self) -> list[ReportedPool]:
        try:
            return [
                ReportedPool(
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

    def _model(self) -> LoadModel:
        try:
            scripted = {
                str(host): {int(index): float(pct) for index, pct in devices.items()}
                for host, devices in (self.config.get("utilization") or {}).items()
            }
            idle_share = float(self.config.get("idle_share", 0.2))
        except (AttributeError, TypeError, ValueError) as exc:
            raise BackendError(f"Simulator config is invalid: {exc!r}") from exc
        return LoadModel(seed=self.config.get("seed"), idle_share=idle_share, scripted=scripted)

    def telemetry(
        self, hosts: Mapping[str, int], held: Mapping[str, frozenset[int]] | None = None
    ) -> list[NodeTelemetry]:
        """Simulated readings of the model (`simulated_load`): a device nothing holds reads
        0 %, a held one its stable draw; the configured `utilization` wins. Without `held`
        (a caller that does not say) every device counts as held."""
        self._call("telemetry")
        model = self._model()
        try:
            unhealthy = {str(host) for host in self.config.get("unhealthy", [])}
        except TypeError as exc:
            raise BackendError(f"Simulator config is invalid: {exc!r}") from exc
        minute = int(_now() // 60)
        readings = []
        for host, count in hosts.items():
            busy = None if held is None else held.get(host, frozenset())
            devices = [
                AcceleratorReading(
                    index=index,
                    utilization_pct=model.card_utilization(
                        host, index, held=busy is None or index in busy, minute=minute
                    ),
                )
                for index in range(int(count))
            ]
            readings.append(
                NodeTelemetry(
                    hostname=host,
                    healthy=host not in unhealthy,
                    accelerators=tuple(devices),
                    simulated=True,
                )
            )
        return readings

    def host_metrics(self, hosts: Sequence[HostLoad], at: datetime) -> list[HostMetrics]:
        """Each host's figures at `at`'s minute, from the cards it holds (the model's)."""
        self._call("host_metrics")
        model = self._model()
        minute = int(at.timestamp() // 60)
        return [model.host_figures(load, minute) for load in hosts]

    # The simulated cluster has no scheduler of its own: a drain lives in the portal alone.
    def drain_node(self, hostname: str, reason: str) -> None:
        pass

    def resume_node(self, hostname: str) -> None:
        pass

    # --- hosts -----------------------------------------------------------------------------------
    # A host request completes `latency_seconds` after it was made, with the outcome drawn when
    # it was made. Drivers are built per call and keep nothing, so the request's handle carries
    # what a later look needs: "simhost:<operation>:<done at, epoch s>:<ok|fault>:<host handle>".

    def _request(self, operation: str, host: str) -> str:
        self._raise_injected()
        low, high = self.config.get("latency_seconds", [0, 0])
        latency = self._random.uniform(low, high) if high else 0.0
        failure = self._drawn_failure(operation)
        if failure is not None and failure.transient:
            raise failure  # not accepted: the job asks again
        outcome = "fault" if failure is not None else "ok"
        return f"simhost:{operation}:{_now() + latency!r}:{outcome}:{host}"

    def provision(self, spec: HostSpec) -> str:
        digest = hashlib.sha256(f"{spec.node}/{spec.name}".encode()).hexdigest()
        return self._request("provision", f"sim-{digest[:12]}")

    def stop(self, handle: str) -> str:
        return self._request("stop", handle)

    def start(self, handle: str, spec: HostSpec | None = None) -> str:
        return self._request("start", handle)

    def resize(self, handle: str, spec: HostSpec) -> str:
        return self._request("resize", handle)

    def set_disk(self, handle: str, data_disk_gb: int) -> str:
        return self._request("set_disk", handle)

    def set_bandwidth(self, handle: str, bandwidth_mbps: int) -> str:
        return self._request("set_bandwidth", handle)

    def release(self, handle: str) -> str:
        return self._request("release", handle)

    def host_request_status(self, request: str) -> HostRequestStatus:
        self._raise_injected()
        try:
            kind, operation, done_at, outcome, host = request.split(":", 4)
            done_at = float(done_at)
        except ValueError:
            kind = ""
        if kind != "simhost":
            raise BackendError(f"simulator: no host request {request!r}")
        if _now() < done_at:
            return HostRequestStatus(done=False)
        if outcome == "fault":
            raise BackendError(f"simulator: {operation} failed (simulated hardware fault)")
        if operation != "provision":
            return HostRequestStatus(done=True)
        address = self._address(host)
        return HostRequestStatus(done=True, access=HostAccess(handle=host, address=address))

    @staticmethod
    def _address(host: str) -> str:
        """A stable address in the benchmarking range (RFC 2544): nothing answers there."""
        try:
            digest = bytes.fromhex(host.removeprefix("sim-"))
        except ValueError:
            raise BackendError(f"simulator: no host {host!r}") from None
        if len(digest) < 2:
            raise BackendError(f"simulator: no host {host!r}")
        return f"198.18.{digest[0]}.{digest[1] or 1}"

    # --- network ---------------------------------------------------------------------------------
    # Nothing is kept: each simulated host has an address of its own (`_address`), so a port
    # is "forwarded" to the same port there: SSH on 22, a mapping of 8888 on 8888. Consistent
    # from one call to the next, and never a port a real server handed out.

    def set_network(self, handle: str, network: HostNetwork) -> HostPorts:
        ports = [ForwardedPort("tcp", SSH_PORT, SSH_PORT, PURPOSE_SSH)]
        ports += [
            ForwardedPort(m.protocol, m.host_port, m.host_port, PURPOSE_MAPPING)
            for m in network.mappings
        ]
        return HostPorts(address=self._address(handle), ports=tuple(ports))

    # --- training tasks --------------------------------------------------------------------------
    # The handle carries what a later look needs (drivers are built per call and keep nothing):
    # "simtask-<digest>-<start, epoch seconds>-<run seconds>", and "-x<exit code>" after it for a
    # scripted run (`tasks`); a gang task's (several nodes) ends in "/<node>,<node>,…".

    TASK_STEPS = 3
    RENDEZVOUS_PORT = 29500

    def submit_task(self, spec: TaskSpec) -> str:
        self._call("submit_task")
        digest = hashlib.sha256(
            f"{self.config.get('seed')}/{spec.node}/{spec.name}/{spec.command}".encode()
        ).hexdigest()[:12]
        script = (self.config.get("tasks") or {}).get(spec.name)
        try:
            seconds = float((script or {}).get("seconds", self.config.get("task_seconds", 0)))
            exit_code = "" if script is None else f"-x{int(script.get('exit_code', 0))}"
        except (AttributeError, TypeError, ValueError) as exc:
            raise BackendError(f"Simulator config is invalid: {exc!r}") from exc
        gang = f"/{','.join(spec.nodes)}" if len(spec.nodes) > 1 else ""
        return f"simtask-{digest}-{int(_now())}-{seconds:g}{exit_code}{gang}"

    def _run_of(self, handle: str) -> tuple[str, float, float, int, int | None]:
        """(digest, start and run seconds, steps printed, exit code once done) of a simulated
        run, read off its handle."""
        handle = handle.partition("/")[0]
        try:
            _, digest, started, seconds, *scripted = handle.split("-")
            started, seconds = int(started), float(seconds)
            draw = int(digest[:4], 16) / 0xFFFF
            if scripted:
                (code,) = scripted
                exit_code = int(code.removeprefix("x"))
            else:
                exit_code = int(draw < float(self.config.get("task_failure_rate", 0)))
        except ValueError as exc:
            raise BackendError(f"simulator: no task {handle!r}") from exc
        elapsed = _now() - started
        done = elapsed >= seconds
        steps = self.TASK_STEPS if done else int(self.TASK_STEPS * elapsed / seconds)
        return digest, started, seconds, steps, exit_code if done else None

    def task_status(self, handle: str) -> TaskStatus:
        """With the run's own start and end, as a batch system's accounting gives them."""
        self._call("task_status")
        _digest, started, seconds, _steps, exit_code = self._run_of(handle)
        started_at = datetime.fromtimestamp(started, UTC)
        if exit_code is None:
            return TaskStatus(TASK_RUNNING, started_at=started_at)
        times = {"started_at": started_at, "finished_at": started_at + timedelta(seconds=seconds)}
        if exit_code:
            return TaskStatus(
                TASK_FAILED,
                message=f"simulator: the task exited with code {exit_code} (simulated)",
                exit_code=exit_code,
                **times,
            )
        return TaskStatus(TASK_SUCCEEDED, exit_code=0, **times)

    def task_logs(self, handle: str) -> str:
        digest, _started, _seconds, steps, exit_code = self._run_of(handle)
        done = exit_code is not None
        lines = [f"[simulator] task {digest} started"]
        nodes = handle.partition("/")[2]
        if nodes:
            # What a batch system gives a multi-node job to find its peers (Slurm's names).
            lines.append(
                f"[simulator] SLURM_JOB_NODELIST={nodes} NNODES={len(nodes.split(','))} "
                f"MASTER_ADDR={nodes.split(',')[0]} MASTER_PORT={self.RENDEZVOUS_PORT}"
            )
        for step in range(1, steps + 1):
            loss = 2.0 / (step + int(digest[4:6], 16) / 255)
            lines.append(f"[simulator] step {step}/{self.TASK_STEPS} loss={loss:.4f}")
        if done:
            lines.append(f"[simulator] exit code {exit_code}")
        return "\n".join(lines)

    def cancel_task(self, handle: str) -> None:
        self._call("cancel_task")
