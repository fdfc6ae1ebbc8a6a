import ctypes.util
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.agent.fake_portal import FakePortal, portal_handler

AGENT_SOURCE = Path(__file__).resolve().parents[2] / "agent"
FAKE_NVML_SOURCE = Path(__file__).resolve().parent / "fake_nvml" / "fake_nvml.c"

# The tests read the checkout's agent, whether or not `pip install ./agent` has been run.
if str(AGENT_SOURCE) not in sys.path:
    sys.path.insert(0, str(AGENT_SOURCE))


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory) -> Path:
    """A folder holding the fake libnvidia-ml.so.1, built from C for this run."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed, so the fake libnvidia-ml.so.1 can't be built")
    folder = tmp_path_factory.mktemp("fake_nvml")
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", folder / "libnvidia-ml.so.1"]
        + [FAKE_NVML_SOURCE],
        check=True,
    )
    return folder


@pytest.fixture
def no_nvml_dir(tmp_path) -> Path:
    """A library path without libnvidia-ml.so.1, on a machine whose loader can't find one either."""
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real NVIDIA driver, so NVML can't be made to be absent")
    folder = tmp_path / "no_nvml"
    folder.mkdir()
    return folder


@pytest.fixture
def agent_env(tmp_path):
    """agent_env(library_dir, FAKE_NVML_GPUS="2", ...) -> the environment for an agent process.

    pynvml loads libnvidia-ml.so.1 once per process, so every NVML case runs in its own process.
    """
    empty_bin = tmp_path / "empty_bin"
    empty_bin.mkdir(exist_ok=True)

    def make(library_dir: Path, **fake_nvml: str) -> dict[str, str]:
        env = {
            name: value for name, value in os.environ.items() if not name.startswith("FAKE_NVML")
        }
        env["PYTHONPATH"] = str(AGENT_SOURCE)
        env["LD_LIBRARY_PATH"] = str(library_dir)
        # No vendor tools on PATH: the declared readers report "not present".
        env["PATH"] = str(empty_bin)
        env.update(fake_nvml)
        return env

    return make


def run_agent(*args: str, env: dict[str, str], config: Path | None = None, timeout: float = 60):
    """Run `loam-agent ARGS` as its own process; without `config`, no configuration file."""
    command = [sys.executable, "-m", "loam_agent", "--config", str(config or os.devnull), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def portal():
    """A real HTTP server on 127.0.0.1 standing in for the portal's agent API."""
    fake = FakePortal()
    server = ThreadingHTTPServer(("127.0.0.1", 0), portal_handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join()


def fake_image(images, name, *, recipe=None, digest="sha256:" + "ab" * 32):
    """An image folder as a build leaves it, without building one."""
    from loam_agent.hosts.image import load_recipe

    folder = images / name
    (folder / "rootfs").mkdir(parents=True)
    recipe = recipe or load_recipe(name).digest
    (folder / "image.json").write_text(
        f'{{"recipe": "{recipe}", "digest": "{digest}", "size_bytes": 1073741824}}'
    )


IMAGE_NAME = "debian-12"


def _containers_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "real hosts need root"
    for command in ("systemd-nspawn", "debootstrap", "ssh", "ip", "tc", "resize2fs"):
        if shutil.which(command) is None:
            return f"{command} is not installed (bash deploy/agent/install.sh)"
    return None


def _built_images(*names: str) -> Path:
    """The folder of the host images, with `names` built in it: each once per machine and
    recipe into LOAM_AGENT_IMAGE_DIR, default /var/cache/loam-agent/images (debian-12 about a
    minute or two, pytorch a few). Skips where real hosts can't run, unless
    LOAM_REQUIRE_SERVICES=1, where that is a failure."""
    from loam_agent.hosts.image import build_image

    required = os.environ.get("LOAM_REQUIRE_SERVICES") == "1"
    reason = _containers_unavailable()
    if reason:
        if required:
            pytest.fail(f"LOAM_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)
    images = Path(os.environ.get("LOAM_AGENT_IMAGE_DIR", "/var/cache/loam-agent/images"))
    mirror = os.environ.get("MIRROR", "http://deb.debian.org/debian")
    for name in names:
        build_image(images, name, mirror)
    return images


@pytest.fixture(scope="session")
def host_images() -> Path:
    """The folder of the host images, with the base image (debian-12) built."""
    return _built_images(IMAGE_NAME)


@pytest.fixture(scope="session")
def pytorch_images(host_images) -> Path:
    """The same folder, with the pytorch image built too (for the tests that use it)."""
    return _built_images(IMAGE_NAME, "pytorch")


@pytest.fixture(scope="session")
def server_network(outside_world):
    """The GPU server's network for real hosts: its uplink and public address face the
    outside world, whose DNS the hosts are given."""
    from loam_agent.hosts.network import ServerNetwork

    from tests.outside_world import PUBLIC_ADDRESS, UPLINK

    return ServerNetwork(
        uplink=UPLINK, public_address=PUBLIC_ADDRESS, dns_servers=outside_world.dns_servers
    )


@pytest.fixture(scope="session")
def network_config(server_network) -> str:
    """The same, as lines of an agent's configuration file."""
    servers = ", ".join(f'"{server}"' for server in server_network.dns_servers)
    return (
        f'uplink = "{server_network.uplink}"\n'
        f'public_address = "{server_network.public_address}"\n'
        f"dns_servers = [{servers}]\n"
    )


# Taken at import, before any test patches it.
_real_connect = socket.socket.connect
HOST_NETWORKS = ipaddress.ip_network("10.213.0.0/16")


@pytest.fixture(autouse=True)
def _no_traffic_off_this_machine(monkeypatch, _no_traffic_off_this_machine):
    """As tests/conftest.py's guard, plus the host networks: veths on this machine (10.213/16),
    where the agent's readiness probe connects to each host's sshd."""
    guarded_connect = socket.socket.connect

    def connect(sock, address):
        if sock.family == socket.AF_INET and _on_host_network(address[0]):
            return _real_connect(sock, address)
        return guarded_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def _on_host_network(host) -> bool:
    try:
        return ipaddress.ip_address(str(host)) in HOST_NETWORKS
    except ValueError:
        return False


@pytest.fixture
def ssh_key(tmp_path) -> Path:
    """A key pair to log in to a real host with (its private half's path)."""
    key = tmp_path / "id_host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    return key
