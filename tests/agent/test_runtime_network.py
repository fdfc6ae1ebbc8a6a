"""Real hosts on the network, tried from the outside world (tests/outside_world.py): SSH through
the server's public port, port mappings, security groups changed live, egress with DNS, the
bandwidth sold, and hosts of different organizations kept apart."""

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from loam_agent.hosts.model import DesiredHost, HostNetwork
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import HostRuntime, host_key

from tests.outside_world import OUTSIDE_ADDRESS, OUTSIDE_NAME, PACKAGE, PUBLIC_ADDRESS, outside

pytestmark = pytest.mark.containers

SSH_OPTIONS = [
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
    "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
]  # fmt: skip
PUBLIC_IP = "198.51.100.130"  # in the outside world's ROUTED_TO_SERVER
ANYWHERE = [
    {"protocol": "tcp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
    {"protocol": "udp", "from_port": 1, "to_port": 65535, "source": "0.0.0.0/0"},
]


@pytest.fixture
def runtime(tmp_path, host_images, server_network):
    runtime = HostRuntime(tmp_path / "state", host_images, dict, server_network)
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


def network(group="o-1", ports=(), ingress=ANYWHERE, public_ip="") -> HostNetwork:
    return HostNetwork.from_json(
        {"group": group, "ports": list(ports), "ingress": list(ingress), "public_ip": public_ip}
    )


def ssh_port(server_port: int) -> dict:
    return {"purpose": "ssh", "protocol": "tcp", "server_port": server_port, "host_port": 22}


def mapping(server_port: int, host_port: int) -> dict:
    return {"protocol": "tcp", "server_port": server_port, "host_port": host_port}


def start_host(runtime, key: Path, *, bandwidth_mbps=0, **network_values) -> tuple[str, str]:
    host_id = f"h-net-{uuid.uuid4().hex[:8]}"
    host = DesiredHost(
        id=host_id,
        generation=1,
        state="running",
        vcpu=1,
        memory_mib=512,
        data_disk_gb=0,
        bandwidth_mbps=bandwidth_mbps,
        ssh_public_keys=(key.with_suffix(".pub").read_text(),),
        network=network(**network_values),
    )
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host_id).address
    assert ssh_answers(address), (runtime.folder(host_id) / "console.log").read_text()
    return host_id, address


def from_outside(key: Path, port: int, command: str) -> subprocess.CompletedProcess:
    """A tenant's laptop on the internet: ssh -p PORT root@<the server's public address>."""
    return outside(
        "ssh", "-i", str(key), "-p", str(port), *SSH_OPTIONS, f"root@{PUBLIC_ADDRESS}", command
    )


def inside(key: Path, address: str, command: str, timeout: float = 60) -> str:
    """Run `command` in the host as its root (through its internal address, from the server)."""
    result = subprocess.run(
        ["ssh", "-i", str(key), *SSH_OPTIONS, f"root@{address}", command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def outside_reaches(port: int) -> bool:
    """Whether a TCP connection from the outside to the server's public PORT is accepted."""
    probe = f"exec 3<>/dev/tcp/{PUBLIC_ADDRESS}/{port}"
    return outside("timeout", "3", "bash", "-c", probe).returncode == 0


def host_reaches(key: Path, address: str, target: str, port: int) -> bool:
    """Whether a TCP connection from inside the host at `address` to target:port is accepted."""
    probe = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{target}/{port}' && echo open || echo closed"
    return inside(key, address, probe).strip() == "open"


def test_a_host_is_reached_from_outside_and_reaches_the_internet(runtime, ssh_key):
    host_id, address = start_host(runtime, ssh_key, ports=[ssh_port(20100), mapping(20101, 8888)])

    # SSH from the tenant's laptop through the server's public port, with the tenant's key.
    started = time.monotonic()
    while (result := from_outside(ssh_key, 20100, "hostname")).returncode != 0:
        assert time.monotonic() - started < 10, result.stderr
        time.sleep(0.2)

    # A port mapping: a server in the host, reached on its mapped public port.
    inside(ssh_key, address, "cd /tmp && echo mapped > index.html && "
           "(setsid python3 -m http.server 8888 >/dev/null 2>&1 &)")  # fmt: skip
    deadline = time.monotonic() + 10
    while (page := outside("curl", "-sf", f"http://{PUBLIC_ADDRESS}:20101/")).returncode != 0:
        assert time.monotonic() < deadline, page.stderr
        time.sleep(0.2)
    assert page.stdout == "mapped\n"

    # Out: a name resolved through the DNS the host was given, a page and a package fetched.
    assert OUTSIDE_ADDRESS in inside(ssh_key, address, f"getent hosts {OUTSIDE_NAME}")
    assert inside(ssh_key, address, f"curl -sf http://{OUTSIDE_NAME}/hello.txt") == (
        "hello from the outside\n"
    )
    inside(
        ssh_key,
        address,
        f"python3 -m pip download --no-deps -d /tmp/wheels "
        f"--trusted-host {OUTSIDE_NAME} --index-url http://{OUTSIDE_NAME}/simple {PACKAGE}",
    )
    assert "loam_probe-1.0-py3-none-any.whl" in inside(ssh_key, address, "ls /tmp/wheels")


def test_a_host_with_a_public_ip_of_its_own(runtime, ssh_key, outside_world):
    """A park that routes public addresses to the server gives a host one: every port of it
    reaches the host (within its security group), and the host goes out from it."""
    start_host(runtime, ssh_key, public_ip=PUBLIC_IP)
    result = outside(
        "ssh", "-i", str(ssh_key), *SSH_OPTIONS, f"root@{PUBLIC_IP}", "curl -sf "
        f"http://{OUTSIDE_ADDRESS}/hello.txt?from-own-ip",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert PUBLIC_IP in outside_world.http_clients()


def test_the_security_group_closes_and_opens_ports_live(runtime, ssh_key):
    ports = [ssh_port(20110), mapping(20111, 8888)]
    host_id, address = start_host(runtime, ssh_key, ports=ports)
    inside(ssh_key, address, "(setsid python3 -m http.server 8888 >/dev/null 2>&1 &)")
    pid = (runtime.folder(host_id) / "pid").read_text()
    deadline = time.monotonic() + 10
    while not outside_reaches(20111):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert outside_reaches(20110)

    # Only SSH: the mapped port is refused, SSH still answers; the host was not restarted.
    only_ssh = [{"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "0.0.0.0/0"}]
    runtime.set_network(host_id, network(ports=ports, ingress=only_ssh))
    assert not outside_reaches(20111)
    assert from_outside(ssh_key, 20110, "true").returncode == 0
    assert (runtime.folder(host_id) / "pid").read_text() == pid

    # SSH from an office network only: the outside (203.0.113.0/24) is refused too.
    office = [{"protocol": "tcp", "from_port": 22, "to_port": 22, "source": "192.0.2.0/24"}]
    runtime.set_network(host_id, network(ports=ports, ingress=office))
    assert not outside_reaches(20110)

    # A range that holds the mapped port, from the outside's network: open again.
    wide = [{"protocol": "tcp", "from_port": 8000, "to_port": 9000, "source": "203.0.113.0/24"}]
    runtime.set_network(host_id, network(ports=ports, ingress=wide))
    assert outside_reaches(20111)
    assert not outside_reaches(20110)


def test_hosts_of_one_organization_reach_each_other_and_no_one_else(runtime, ssh_key):
    first_id, first = start_host(runtime, ssh_key, group="o-1")
    _second_id, second = start_host(runtime, ssh_key, group="o-1")
    _other_id, other = start_host(runtime, ssh_key, group="o-2")

    # The probe works: one organization's hosts reach each other (a private network).
    assert host_reaches(ssh_key, first, second, 22)
    assert host_reaches(ssh_key, second, first, 22)
    # Another organization's host is out of reach both ways, whatever its security group.
    assert not host_reaches(ssh_key, first, other, 22)
    assert not host_reaches(ssh_key, other, first, 22)
    # No shared layer 2: each host sees only its own link (its gateway, no neighbour).
    neighbours = inside(ssh_key, other, "ip -4 neigh show; ip -4 -o addr show eth0")
    assert first not in neighbours and second not in neighbours

    # Nothing on the server itself: a listener on the server's own addresses is refused.
    with subprocess.Popen(
        ["python3", "-m", "http.server", "18777", "--bind", "0.0.0.0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as listener:
        try:
            gateway = first.rsplit(".", 1)[0] + ".1"
            deadline = time.monotonic() + 10
            while subprocess.run(
                ["curl", "-sf", "-o", "/dev/null", f"http://{gateway}:18777/"]
            ).returncode:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert not host_reaches(ssh_key, first, gateway, 18777)
            assert not host_reaches(ssh_key, first, PUBLIC_ADDRESS, 18777)
        finally:
            listener.terminate()
    del first_id


def iperf(host_id: str, *, reverse: bool) -> float:
    """Mbit/s from the host's network namespace to the outside's iperf3 server (or back)."""
    command = ["ip", "netns", "exec", f"loam-{host_key(host_id)}", "iperf3", "-J", "-t", "4"]
    command += ["-c", OUTSIDE_ADDRESS, "-O", "1", *(["-R"] if reverse else [])]
    for _attempt in range(5):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        report = json.loads(result.stdout or "{}")
        # The server runs one test at a time, and the previous one may still be closing (busy,
        # or a reset control connection): an error is no measurement, so measure again.
        if "error" not in report:
            break
        time.sleep(1)
    assert "sum_received" in report.get("end", {}), report.get("error") or result.stderr
    return report["end"]["sum_received"]["bits_per_second"] / 1e6


TCP_PAYLOAD_PER_FRAME = 1448 / 1514  # MSS with timestamps, over a 1500-byte MTU's frame


def test_the_bandwidth_sold_is_the_bandwidth_measured(runtime, ssh_key):
    host_id, _address = start_host(runtime, ssh_key, bandwidth_mbps=10)
    pid = (runtime.folder(host_id) / "pid").read_text()
    for mbps in (10, 100):
        runtime.set_bandwidth(host_id, mbps)  # live: the host keeps running
        for reverse in (False, True):
            measured = iperf(host_id, reverse=reverse)
            direction = "in" if reverse else "out"
            print(f"\n{mbps} Mbps sold, {direction}: {measured:.1f} Mbit/s measured")
            # iperf3 counts what TCP delivers; the shaper counts frames on the wire, of which
            # TCP's payload is at most 1448 bytes in 1514 (its, IP's and Ethernet's headers).
            delivered_at_most = mbps * TCP_PAYLOAD_PER_FRAME
            assert 0.9 * delivered_at_most <= measured <= mbps * 1.1, (mbps, direction, measured)
    assert (runtime.folder(host_id) / "pid").read_text() == pid


def nft_table() -> str:
    return subprocess.run(
        ["nft", "list", "table", "inet", "loam"], capture_output=True, text=True
    ).stdout


def test_rules_come_back_after_a_reboot_and_leave_with_the_host(
    runtime, ssh_key, tmp_path, host_images, server_network
):
    host_id, _address = start_host(runtime, ssh_key, ports=[ssh_port(20120)])
    key = host_key(host_id)
    assert re.search(r"dport 20120 dnat ip to 10\.213\.\d+\.2:22", nft_table())

    # A reboot loses the table; the agent's start renders it again from the hosts' state.
    subprocess.run(["nft", "delete", "table", "inet", "loam"], check=True)
    assert not outside_reaches(20120)
    HostRuntime(tmp_path / "state", host_images, dict, server_network).apply_firewall()
    assert outside_reaches(20120)

    runtime.remove(host_id)
    table = nft_table()
    assert "20120" not in table and key not in table
    addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert f"vh-{key}" not in addresses
    assert not outside_reaches(20120)
