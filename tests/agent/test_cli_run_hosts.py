"""`loam-agent run` converging real hosts to what the (fake) portal lists."""

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from loam_agent.client import HOSTS_REPORT_PATH
from loam_agent.credential import Credential, save_credential
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime, host_key

from tests.agent.test_cli import wait_for
from tests.agent.test_runtime import ssh

pytestmark = pytest.mark.containers


@pytest.fixture
def state_dir(tmp_path, host_images, server_network):
    state = tmp_path / "state"
    yield state
    runtime = HostRuntime(state, host_images, dict, server_network)
    for host_id in runtime.list():  # whatever the agent left, even when the test failed
        runtime.remove(host_id)


def reported(portal, host_id: str) -> list[str]:
    return [
        host["state"]
        for request in portal.requests(HOSTS_REPORT_PATH)
        for host in request.body["hosts"]
        if host["id"] == host_id
    ]


def last_report(portal, host_id: str) -> dict:
    return [
        host
        for request in portal.requests(HOSTS_REPORT_PATH)
        for host in request.body["hosts"]
        if host["id"] == host_id
    ][-1]


def test_run_creates_the_listed_host_and_removes_it_when_unlisted(
    tmp_path, state_dir, host_images, portal, fake_nvml_dir, agent_env, network_config
):
    credential = tmp_path / "credential.json"
    save_credential(credential, Credential(portal.url, "srv-1", "s3cret"))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'credential_path = "{credential}"\nstate_dir = "{state_dir}"\n'
        "sample_interval_s = 0.5\nhosts_poll_interval_s = 0.2\n" + network_config
    )
    device = tmp_path / "nvidia0"
    os.mknod(device, 0o666 | 0o020000, os.makedev(195, 0))
    env = agent_env(fake_nvml_dir, FAKE_NVML_GPUS="1")
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env["LOAM_AGENT_IMAGE_DIR"] = str(host_images)
    env["LOAM_AGENT_CARD_DEVICES"] = json.dumps({"GPU-run-0": str(device)})
    host_id = f"h-run-{uuid.uuid4().hex[:8]}"
    portal.hosts = [
        {"id": host_id, "generation": 1, "state": "running", "card_uuids": ["GPU-run-0"],
         "vcpu": 1, "memory_mib": 256, "system_disk_gb": 1, "data_disk_gb": 1,
         "bandwidth_mbps": 0, "image": "debian-12", "ssh_public_keys": []}
    ]  # fmt: skip
    command = [sys.executable, "-m", "loam_agent", "--config", str(config), "run"]
    agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(
            lambda: "running" in reported(portal, host_id) or "failed" in reported(portal, host_id)
        )
        # Full reports repeat states; the order of first appearance is what happened.
        assert list(dict.fromkeys(reported(portal, host_id))) == ["creating", "running"], (
            last_report(portal, host_id)
        )
        assert ssh_answers(last_report(portal, host_id)["address"], wait_s=2)
        # Its full reports carry what it uses, read off its cgroups, data disk and veth.
        wait_for(lambda: last_report(portal, host_id).get("usage"))
        usage = last_report(portal, host_id)["usage"]
        assert usage["memory_limit_mib"] == 256 and usage["disk_size_mib"] > 0, usage
        assert usage["net_rx_bytes"] is not None and usage["net_tx_bytes"] is not None, usage

        # The host outlives the agent; the next agent adopts it without restarting it.
        pid = int((state_dir / "hosts" / host_id / "pid").read_text())
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
        assert Path(f"/proc/{pid}").exists()
        reports_before = len(portal.requests(HOSTS_REPORT_PATH))
        agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: len(portal.requests(HOSTS_REPORT_PATH)) > reports_before)
        assert last_report(portal, host_id)["state"] == "running"
        assert int((state_dir / "hosts" / host_id / "pid").read_text()) == pid

        portal.hosts = []
        wait_for(lambda: "removed" in reported(portal, host_id))
        assert not (state_dir / "hosts" / host_id).exists()
        assert not Path(f"/run/netns/loam-{host_key(host_id)}").exists()
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        stderr = agent.stderr.read()
    assert "stopped" in stderr


def test_run_saves_a_stopped_host_reports_the_image_and_removes_it_when_unkept(
    tmp_path, state_dir, host_images, portal, fake_nvml_dir, agent_env, network_config
):
    credential = tmp_path / "credential.json"
    save_credential(credential, Credential(portal.url, "srv-1", "s3cret"))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'credential_path = "{credential}"\nstate_dir = "{state_dir}"\n'
        "sample_interval_s = 0.5\nhosts_poll_interval_s = 0.2\n" + network_config
    )
    saved = tmp_path / "saved-images"  # never the shared image cache
    env = agent_env(fake_nvml_dir, FAKE_NVML_GPUS="1")
    env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
    env["LOAM_AGENT_IMAGE_DIR"] = str(host_images)
    env["LOAM_AGENT_SAVED_IMAGE_DIR"] = str(saved)
    host_id = f"h-run-{uuid.uuid4().hex[:8]}"
    portal.hosts = [
        {"id": host_id, "generation": 2, "state": "stopped", "vcpu": 1, "memory_mib": 256,
         "system_disk_gb": 1, "data_disk_gb": 0, "image": "debian-12", "ssh_public_keys": [],
         "save_image": "saved-run"}
    ]  # fmt: skip
    portal.saved_images = ["saved-run"]
    command = [sys.executable, "-m", "loam_agent", "--config", str(config), "run"]
    agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(
            lambda: reported(portal, host_id) and last_report(portal, host_id).get("saved_image"),
            timeout_s=120,
        )
        report = last_report(portal, host_id)
        assert report["state"] == "stopped" and report["saved_image"]["name"] == "saved-run"
        assert report["saved_image"]["digest"].startswith("sha256:")
        # Its heartbeats report it beside the built images, with the same digest.
        wait_for(
            lambda: (
                {"name": "saved-run", "digest": report["saved_image"]["digest"]}
                in portal.requests("/api/v1/agent/heartbeat")[-1].body["images"]
            )
        )
        # Deleted at the portal: the files go once no host here has it as its image.
        portal.hosts, portal.saved_images = [], []
        wait_for(lambda: not (saved / "saved-run").exists())
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        agent.stderr.read()


def volume_reports(portal) -> list[list[dict]]:
    return [
        request.body["volumes"]
        for request in portal.requests(HOSTS_REPORT_PATH)
        if "volumes" in request.body
    ]


def test_run_carries_a_volume_from_a_released_host_to_the_next(
    tmp_path, state_dir, host_images, portal, ssh_key, network_config
):
    """The protocol end to end with a real agent: the server's volume made and reported, bound
    into host A, written there; A unlisted (released), the volume kept; B lists it and reads
    A's file; the volume unlisted is deleted from the server."""
    credential = tmp_path / "credential.json"
    save_credential(credential, Credential(portal.url, "srv-1", "s3cret"))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'credential_path = "{credential}"\nstate_dir = "{state_dir}"\n'
        "sample_interval_s = 0.5\nhosts_poll_interval_s = 0.2\n" + network_config
    )
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    env["LOAM_AGENT_IMAGE_DIR"] = str(host_images)
    env["LOAM_AGENT_CARD_DEVICES"] = "{}"

    def host(host_id: str, mount_path: str) -> dict:
        return {"id": host_id, "generation": 1, "state": "running", "vcpu": 1,
                "memory_mib": 256, "data_disk_gb": 0, "image": "debian-12",
                "ssh_public_keys": [ssh_key.with_suffix(".pub").read_text()],
                "volumes": [{"id": "vol-carried", "mount_path": mount_path}]}  # fmt: skip

    first, second = f"h-va-{uuid.uuid4().hex[:8]}", f"h-vb-{uuid.uuid4().hex[:8]}"
    portal.volumes = [{"id": "vol-carried", "size_gb": 1}]
    portal.hosts = [host(first, "/mnt/work")]
    command = [sys.executable, "-m", "loam_agent", "--config", str(config), "run"]
    agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: {"running", "failed"} & set(reported(portal, first)))
        assert last_report(portal, first)["state"] == "running", last_report(portal, first)
        assert volume_reports(portal)[0] == [{"id": "vol-carried", "state": "ready", "size_gb": 1}]
        address = last_report(portal, first)["address"]
        assert ssh_answers(address, wait_s=5)
        ssh(ssh_key, address, "echo 'written on A' > /mnt/work/proof && sync")

        portal.hosts = []  # A released: the volume stays on the server
        wait_for(lambda: "removed" in reported(portal, first))
        assert (state_dir / "volumes" / "vol-carried.img").exists()
        portal.hosts = [host(second, "/data/work")]
        wait_for(lambda: {"running", "failed"} & set(reported(portal, second)), timeout_s=60)
        address = last_report(portal, second)["address"]
        assert ssh_answers(address, wait_s=5)
        assert ssh(ssh_key, address, "cat /data/work/proof").strip() == "written on A"

        portal.hosts, portal.volumes = [], []
        wait_for(lambda: not (state_dir / "volumes" / "vol-carried.img").exists())
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        agent.stderr.read()
