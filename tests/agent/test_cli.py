"""`loam-agent enrol` and `loam-agent run` as processes, against the fake NVML and a real HTTP
server standing in for the portal."""

import json
import signal
import stat
import subprocess
import sys
import time

import pytest
from loam_agent.client import ENROL_PATH, HEARTBEAT_PATH
from loam_agent.credential import Credential, save_credential

from tests.agent.conftest import fake_image, run_agent


@pytest.fixture
def config(tmp_path):
    """A configuration keeping the credential in tmp_path and sampling five times a second."""
    path = tmp_path / "agent.toml"
    path.write_text(
        f'credential_path = "{tmp_path / "state" / "credential.json"}"\nsample_interval_s = 0.2\n'
    )
    return path


def credential_path(tmp_path):
    return tmp_path / "state" / "credential.json"


def test_enrol_writes_the_credential_owner_only(tmp_path, config, portal, fake_nvml_dir, agent_env):
    result = run_agent(
        "enrol",
        "--portal",
        portal.url + "/",
        "--token",
        "join-123",
        env=agent_env(fake_nvml_dir, FAKE_NVML_GPUS="2"),
        config=config,
    )

    assert result.returncode == 0, result.stderr
    path = credential_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "portal_url": portal.url,
        "server_id": "srv-1",
        "secret": "s3cret-credential",
    }
    [request] = portal.requests(ENROL_PATH)
    assert request.body["join_token"] == "join-123"
    assert request.body["server"]["cpu_count"] > 0
    assert [card["device_path"] for card in request.body["cards"]] == [
        "/dev/nvidia0",
        "/dev/nvidia1",
    ]
    assert {"vendor": "nvidia", "state": "ok", "message": "driver 550.54.15-fake"} in request.body[
        "readers"
    ]


def test_a_refused_join_token_writes_nothing_and_exits_3(
    tmp_path, config, portal, fake_nvml_dir, agent_env
):
    portal.answer(ENROL_PATH, (401, {"detail": "join token already used"}))

    result = run_agent(
        "enrol",
        "--portal",
        portal.url,
        "--token",
        "used",
        env=agent_env(fake_nvml_dir),
        config=config,
    )

    assert result.returncode == 3
    assert "join token already used" in result.stderr
    assert not credential_path(tmp_path).exists()


def test_enrolling_again_needs_force(tmp_path, config, portal, fake_nvml_dir, agent_env):
    save_credential(credential_path(tmp_path), Credential(portal.url, "srv-0", "old"))
    env = agent_env(fake_nvml_dir)

    refused = run_agent("enrol", "--portal", portal.url, "--token", "t", env=env, config=config)
    forced = run_agent(
        "enrol", "--portal", portal.url, "--token", "t", "--force", env=env, config=config
    )

    assert refused.returncode == 2
    assert "already enrolled" in refused.stderr
    assert forced.returncode == 0, forced.stderr
    assert json.loads(credential_path(tmp_path).read_text())["server_id"] == "srv-1"


def start_run(config, env) -> subprocess.Popen:
    command = [sys.executable, "-m", "loam_agent", "--config", str(config), "run"]
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_run_sends_heartbeats_with_inventory_and_samples_until_sigterm(
    tmp_path, config, portal, fake_nvml_dir, agent_env
):
    save_credential(credential_path(tmp_path), Credential(portal.url, "srv-1", "s3cret"))
    fake_image(tmp_path / "images", "pytorch")
    env = agent_env(fake_nvml_dir, FAKE_NVML_GPUS="2", FAKE_NVML_UTIL="90,10")
    agent = start_run(config, {**env, "LOAM_AGENT_IMAGE_DIR": str(tmp_path / "images")})
    try:
        wait_for(lambda: len(portal.requests(HEARTBEAT_PATH)) >= 2)
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        stderr = agent.stderr.read()

    assert "stopped" in stderr
    heartbeat = portal.requests(HEARTBEAT_PATH)[0]
    assert heartbeat.headers["authorization"] == "Bearer s3cret"
    assert len(heartbeat.body["cards"]) == 2
    assert [sample["utilization_pct"] for sample in heartbeat.body["samples"]] == [90, 10]
    assert heartbeat.body["taken_at"].endswith("Z")
    assert heartbeat.body["agent_version"]
    # The images built on the server, in every heartbeat.
    assert heartbeat.body["images"] == [{"name": "pytorch", "digest": "sha256:" + "ab" * 32}]


def test_run_stops_with_status_3_when_the_credential_is_revoked(
    tmp_path, config, portal, fake_nvml_dir, agent_env
):
    save_credential(credential_path(tmp_path), Credential(portal.url, "srv-1", "s3cret"))
    portal.answer(HEARTBEAT_PATH, (401, {"detail": "credential revoked"}))

    agent = start_run(config, agent_env(fake_nvml_dir))
    try:
        status = agent.wait(timeout=30)
    finally:
        agent.kill()
        stderr = agent.stderr.read()

    assert status == 3
    assert "credential revoked" in stderr
    assert len(portal.requests(HEARTBEAT_PATH)) == 1


def test_run_without_a_credential_says_to_enrol(config, fake_nvml_dir, agent_env):
    result = run_agent("run", env=agent_env(fake_nvml_dir), config=config)

    assert result.returncode == 2
    assert "enrol this server first" in result.stderr
