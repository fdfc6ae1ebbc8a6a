"""The simulator's host requests: each returns at once, and completes `latency_seconds` after
it was made (a failure drawn then shows when it completes)."""

import time
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.orchestration.backends.base import (
    BackendError,
    HostNetwork,
    HostSpec,
    IngressRule,
    PortForward,
)
from apps.orchestration.backends.simulator import SimulatorDriver

START = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)
SPEC = HostSpec(
    name="gpu-host",
    node="sim-1",
    accelerator_indices=(0, 1),
    vcpu=32,
    ram_gb=256,
    system_disk_gb=100,
    data_disk_gb=0,
    bandwidth_mbps=10,
    image="ubuntu-cuda",
    ssh_public_key="",
)


@pytest.fixture(autouse=True)
def _no_injected_failures():
    SimulatorDriver.clear_injected()
    yield
    SimulatorDriver.clear_injected()


@pytest.fixture
def clock():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def test_a_host_request_returns_at_once_and_completes_after_its_latency(clock):
    driver = SimulatorDriver({"latency_seconds": [2, 2]})
    request = driver.provision(SPEC)

    assert not driver.host_request_status(request).done
    clock.shift(timedelta(seconds=1.9))
    assert not driver.host_request_status(request).done
    clock.shift(timedelta(seconds=0.2))
    status = driver.host_request_status(request)
    assert status.done
    assert status.access.handle.startswith("sim-")
    assert status.access.address.startswith("198.18.")


def test_the_call_does_not_wait_for_the_latency():
    driver = SimulatorDriver({"latency_seconds": [30, 30]})
    began = time.monotonic()

    request = driver.provision(SPEC)
    driver.stop("sim-abc")

    assert time.monotonic() - began < 1
    assert not driver.host_request_status(request).done


def test_latencies_are_drawn_within_the_configured_range(clock):
    driver = SimulatorDriver({"latency_seconds": [1, 3], "seed": 5})
    requests = [driver.start(f"sim-{n}") for n in range(50)]

    clock.shift(timedelta(seconds=0.99))
    assert not any(driver.host_request_status(r).done for r in requests)
    clock.shift(timedelta(seconds=1))
    done_at_two = sum(driver.host_request_status(r).done for r in requests)
    assert 0 < done_at_two < len(requests)
    clock.shift(timedelta(seconds=1.02))
    assert all(driver.host_request_status(r).done for r in requests)


def test_without_latency_a_request_is_done_at_the_first_look():
    driver = SimulatorDriver({})
    assert driver.host_request_status(driver.release("sim-abc")).done


def test_provisioning_the_same_host_again_gives_the_same_host():
    driver = SimulatorDriver({})
    first = driver.host_request_status(driver.provision(SPEC)).access
    again = driver.host_request_status(driver.provision(SPEC)).access
    other = driver.host_request_status(
        driver.provision(HostSpec(**{**SPEC.__dict__, "name": "other-host"}))
    ).access

    assert first == again
    assert other.handle != first.handle


def test_a_hosts_network_is_its_own_ports_on_its_simulated_address():
    driver = SimulatorDriver({})
    access = driver.host_request_status(driver.provision(SPEC)).access
    network = HostNetwork(
        group="o-1",
        ingress=(IngressRule("tcp", 1, 65535, "0.0.0.0/0"),),
        mappings=(PortForward("tcp", 8888), PortForward("udp", 5353)),
    )

    ports = driver.set_network(access.handle, network)

    assert ports.address == access.address and ports.address.startswith("198.18.")
    assert [(p.purpose, p.protocol, p.host_port, p.server_port) for p in ports.ports] == [
        ("ssh", "tcp", 22, 22),
        ("mapping", "tcp", 8888, 8888),
        ("mapping", "udp", 5353, 5353),
    ]
    assert driver.set_network(access.handle, network) == ports  # the same again
    with pytest.raises(BackendError):
        driver.set_network("not-a-host", network)


def test_a_failing_request_is_accepted_and_fails_when_it_completes(clock):
    driver = SimulatorDriver({"latency_seconds": [1, 1], "failure_rate": 1})
    request = driver.resize("sim-abc", SPEC)

    assert not driver.host_request_status(request).done
    clock.shift(timedelta(seconds=1))
    with pytest.raises(BackendError, match="resize failed") as failed:
        driver.host_request_status(request)
    assert not failed.value.transient


def test_a_transient_failure_refuses_the_request():
    driver = SimulatorDriver({"transient_failure_rate": 1})
    with pytest.raises(BackendError, match="timed out") as refused:
        driver.set_disk("sim-abc", 200)
    assert refused.value.transient


def test_an_injected_error_reaches_the_next_look():
    driver = SimulatorDriver({})
    request = driver.set_bandwidth("sim-abc", 100)
    SimulatorDriver.fail_next(BackendError("busy", transient=True))

    with pytest.raises(BackendError, match="busy"):
        driver.host_request_status(request)
    assert driver.host_request_status(request).done


@pytest.mark.parametrize("request_handle", ["sim-abc", "simhost:provision:soon:ok:sim-abc", ""])
def test_a_request_it_never_made_is_a_permanent_error(request_handle):
    with pytest.raises(BackendError, match="no host request") as unknown:
        SimulatorDriver({}).host_request_status(request_handle)
    assert not unknown.value.transient
