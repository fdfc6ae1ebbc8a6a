"""The simulator's training tasks as a story scripts them (config `tasks`: how long the task of
that name runs and how it exits), and its clock: the portal's, `django.utils.timezone.now`."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.orchestration.backends.base import (
    TASK_FAILED,
    TASK_RUNNING,
    TASK_SUCCEEDED,
    BackendError,
    HostSpec,
    TaskSpec,
)
from apps.orchestration.backends.simulator import SimulatorDriver

START = datetime(2025, 3, 1, 8, 0, tzinfo=UTC)


def spec(name: str) -> TaskSpec:
    return TaskSpec(
        name=name,
        node="sim-1",
        accelerator_indices=(0,),
        accelerator_milli=1000,
        vcpu=8,
        ram_gb=64,
        image="ubuntu-cuda",
        command="python train.py",
    )


@pytest.fixture
def clock(monkeypatch):
    """The portal's clock, set by hand: clock(moment) moves it there."""

    def move(moment: datetime) -> None:
        monkeypatch.setattr(timezone, "now", lambda: moment)

    move(START)
    return move


SCRIPT = {
    "tasks": {
        "sft": {"seconds": 5400, "exit_code": 0},
        "distill": {"seconds": 600, "exit_code": 137},
    }
}


def test_a_scripted_task_runs_its_time_and_succeeds(clock):
    driver = SimulatorDriver(SCRIPT)
    handle = driver.submit_task(spec("sft"))

    clock(START + timedelta(seconds=5399))
    assert driver.task_status(handle).state == TASK_RUNNING
    assert "step 2/3" in driver.task_logs(handle)
    clock(START + timedelta(seconds=5400))
    status = driver.task_status(handle)
    assert (status.state, status.exit_code) == (TASK_SUCCEEDED, 0)
    assert driver.task_logs(handle).endswith("exit code 0")


def test_a_task_reports_when_it_ran_as_a_batch_systems_accounting_does(clock):
    driver = SimulatorDriver(SCRIPT)
    handle = driver.submit_task(spec("sft"))

    clock(START + timedelta(minutes=30))
    running = driver.task_status(handle)
    assert (running.started_at, running.finished_at) == (START, None)
    clock(START + timedelta(days=1))  # looked at long after it ended
    ended = driver.task_status(handle)
    assert (ended.started_at, ended.finished_at) == (START, START + timedelta(seconds=5400))


def test_a_scripted_task_exits_with_its_code(clock):
    driver = SimulatorDriver(SCRIPT)
    handle = driver.submit_task(spec("distill"))

    assert driver.task_status(handle).state == TASK_RUNNING
    clock(START + timedelta(minutes=10))
    status = driver.task_status(handle)
    assert (status.state, status.exit_code) == (TASK_FAILED, 137)
    assert status.message == "simulator: the task exited with code 137 (simulated)"
    # The outcome was fixed when it was submitted: a script changed since does not change it.
    assert SimulatorDriver({}).task_status(handle).exit_code == 137


def test_a_task_the_script_does_not_name_runs_as_configured(clock):
    driver = SimulatorDriver({**SCRIPT, "task_seconds": 60, "task_failure_rate": 1})
    handle = driver.submit_task(spec("other"))

    assert driver.task_status(handle).state == TASK_RUNNING
    clock(START + timedelta(seconds=60))
    assert driver.task_status(handle).state == TASK_FAILED


def test_it_keeps_time_by_the_portals_clock(clock):
    """A host request made at a moment of the portal's clock completes by that clock, however
    long ago that moment was (the demo's history is written at past moments)."""
    driver = SimulatorDriver({"latency_seconds": [30, 30]})
    request = driver.provision(
        HostSpec(
            name="gpu-host",
            node="sim-1",
            accelerator_indices=(0,),
            vcpu=8,
            ram_gb=64,
            system_disk_gb=100,
            data_disk_gb=0,
            bandwidth_mbps=0,
            image="ubuntu-cuda",
            ssh_public_key="",
        )
    )

    clock(START + timedelta(seconds=29))
    assert not driver.host_request_status(request).done
    clock(START + timedelta(seconds=30))
    assert driver.host_request_status(request).done


@pytest.mark.parametrize(
    "config", [{"tasks": {"sft": {"seconds": "soon"}}}, {"tasks": {"sft": "5400"}}]
)
def test_a_script_it_cannot_read_is_a_backend_error(config):
    with pytest.raises(BackendError, match="config is invalid"):
        SimulatorDriver(config).submit_task(spec("sft"))
