"""A tenant's root inside a real host tries to get out: docs/security.md, threat (a).

Each attack is a small Python probe run twice: first where nothing confines it (the server's
own root, in a mount namespace of its own so that nothing it mounts lingers), to show that the
probe does reach what it aims at, then inside a host over SSH as the tenant's root, where it
must be refused. A probe that is broken fails the first half, so no test passes by being broken.
Probes that write put back the value they read: unconfined, they change nothing.

Reaching another organization's host on the network: test_runtime_network.py,
test_hosts_of_one_organization_reach_each_other_and_no_one_else.
"""

import json
import os
import platform
import re
import shlex
import socket
import stat
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from loam_agent.hosts.model import DesiredHost, HostError, HostNetwork
from loam_agent.hosts.reconcile import ssh_answers
from loam_agent.hosts.runtime import BASE_DEVICES, HostRuntime

from tests.agent.test_runtime_network import SSH_OPTIONS, inside

pytestmark = pytest.mark.containers

CARD_MAJOR = 195  # /dev/nvidiaN
ALL_IDS = "0 0 4294967295"  # the server's own uid_map: no user namespace

# Shared by every probe: `attempt(action)` is "ok" or the errno's name (EPERM, EACCES...).
PRELUDE = """
import errno, glob, json, os, stat, subprocess, sys, tempfile

def attempt(action):
    try:
        action()
        return "ok"
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))

def opened(path, flags=os.O_RDONLY):
    os.close(os.open(path, flags | os.O_NONBLOCK))
"""

# CVE-2022-0492: root mounts a cgroup v1 hierarchy and sets its release_agent, a program the
# kernel then runs as the server's root. The value written is the one read: nothing changes.
RELEASE_AGENT_PROBE = """
hierarchy = tempfile.mkdtemp()
mount = subprocess.run(
    ["mount", "-t", "cgroup", "-o", "freezer", "freezer", hierarchy], capture_output=True
)
report = {"mounted": mount.returncode == 0}
if report["mounted"]:
    agent = os.path.join(hierarchy, "release_agent")
    current = open(agent, "rb").read() or b"\\n"

    def write_back():
        fd = os.open(agent, os.O_WRONLY)
        try:
            os.write(fd, current)
        finally:
            os.close(fd)

    report["write"] = attempt(write_back)
    report["unchanged"] = (open(agent, "rb").read() or b"\\n") == current
    subprocess.run(["umount", hierarchy])
print(json.dumps(report))
"""

# mknod BLOCK CHAR ("major:minor" each) on a fresh tmpfs, then open the block node read-only.
MKNOD_PROBE = """
folder = tempfile.mkdtemp()
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", folder], capture_output=True)
block, char = os.path.join(folder, "block"), os.path.join(folder, "char")
numbers = [tuple(map(int, argument.split(":"))) for argument in sys.argv[1:3]]
report = {
    "block": attempt(lambda: os.mknod(block, 0o600 | stat.S_IFBLK, os.makedev(*numbers[0]))),
    "char": attempt(lambda: os.mknod(char, 0o600 | stat.S_IFCHR, os.makedev(*numbers[1]))),
    "open_block": attempt(lambda: opened(block)),
}
subprocess.run(["umount", folder], capture_output=True)
print(json.dumps(report))
"""

# Every device node on every file system but /proc and /sys: [path, "b" or "c", major, minor].
DEVICES_PROBE = """
nodes = []
for folder, folders, files in os.walk("/"):
    if folder == "/":
        folders[:] = [name for name in folders if name not in ("proc", "sys")]
    for name in files:
        path = os.path.join(folder, name)
        mode = os.lstat(path)
        if stat.S_ISBLK(mode.st_mode) or stat.S_ISCHR(mode.st_mode):
            kind = "b" if stat.S_ISBLK(mode.st_mode) else "c"
            nodes.append([path, kind, os.major(mode.st_rdev), os.minor(mode.st_rdev)])
print(json.dumps(nodes))
"""

# Open each PATH read-only: "ok", or why not (EPERM from the device cgroup, ENXIO from a card
# number no driver serves: past every permission check).
OPEN_PROBE = """
print(json.dumps({path: attempt(lambda: opened(path)) for path in sys.argv[1:]}))
"""

# MODE PATH...: open each kernel setting for writing ("open-only"), or also write its current
# value back ("write-back", after trying to make /proc/sys writable again).
WRITE_PROBE = """
mode, paths = sys.argv[1], sys.argv[2:]
report = {}
if mode == "write-back":
    remount = subprocess.run(["mount", "-o", "remount,rw", "/proc/sys"], capture_output=True)
    report["remounted"] = remount.returncode == 0

def write(path):
    current = open(path, "rb").read() if mode == "write-back" else None
    fd = os.open(path, os.O_WRONLY)
    try:
        if current is not None:
            os.write(fd, current)
    finally:
        os.close(fd)

report["writes"] = {path: attempt(lambda: write(path)) for path in paths}
print(json.dumps(report))
"""

# finit_module with no file and init_module with no image: past the permission check they fail
# on their arguments (EBADF, ENOEXEC...) or, without module support, with ENOSYS; never EPERM.
MODULE_PROBE = """
import ctypes, platform
numbers = {"x86_64": (313, 175), "aarch64": (273, 105)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)

def call(number, *arguments):
    if libc.syscall(number, *arguments) == 0:
        return "loaded"
    return errno.errorcode.get(ctypes.get_errno(), "?")

print(json.dumps({
    "finit_module": call(numbers[0], ctypes.c_int(-1), ctypes.c_char_p(b""), ctypes.c_int(0)),
    "init_module": call(numbers[1], None, ctypes.c_ulong(0), ctypes.c_char_p(b"")),
}))
"""

# PID: is it in /proc, can it be signalled (kill -0), and which processes are there.
PROCESSES_PROBE = """
pid = int(sys.argv[1])
listed = {}
for entry in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        listed[entry.split("/")[2]] = open(entry, "rb").read().replace(b"\\0", b" ").decode()
    except OSError:
        pass
print(json.dumps({
    "visible": os.path.exists(f"/proc/{pid}"),
    "kill": attempt(lambda: os.kill(pid, 0)),
    "processes": listed,
}))
"""

# ADDRESS: add ADDRESS/32 to eth0 (and take it away again), open raw sockets (forged packets).
NETWORK_PROBE = """
from socket import AF_INET, AF_PACKET, IPPROTO_RAW, SOCK_RAW, socket
added = subprocess.run(["ip", "addr", "add", f"{sys.argv[1]}/32", "dev", "eth0"]).returncode == 0
if added:
    subprocess.run(["ip", "addr", "del", f"{sys.argv[1]}/32", "dev", "eth0"])
print(json.dumps({
    "address": "ok" if added else "refused",
    "raw": attempt(lambda: socket(AF_INET, SOCK_RAW, IPPROTO_RAW).close()),
    "packet": attempt(lambda: socket(AF_PACKET, SOCK_RAW).close()),
}))
"""

# NAME WALK DISK PATH...: look for a file called NAME through every process's root, by walking
# the file system from WALK ("-": don't), at each PATH (another host's folder on the server),
# and at the top of the block device DISK ("major:minor"; "-": don't), mounted from a node made
# for it. Every file found is read.
FILES_PROBE = """
name, walk, disk, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
found, report = [], {}

def look(path):
    try:
        with open(path) as file:
            found.append([path, file.read()])
    except OSError:
        pass

for path in glob.glob(f"/proc/[0-9]*/root/root/{name}"):
    look(path)
if walk != "-":
    for folder, folders, files in os.walk(walk):
        if folder == "/":
            folders[:] = [each for each in folders if each not in ("proc", "sys")]
        if name in files:
            look(os.path.join(folder, name))
for path in paths:
    look(path)
if disk != "-":
    scratch = tempfile.mkdtemp()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", scratch], capture_output=True)
    node, mounted = os.path.join(scratch, "disk"), os.path.join(scratch, "mounted")
    os.mkdir(mounted)
    number = os.makedev(*map(int, disk.split(":")))
    report["mknod"] = attempt(lambda: os.mknod(node, 0o600 | stat.S_IFBLK, number))
    if report["mknod"] == "ok":
        report["mount"] = subprocess.run(["mount", node, mounted], capture_output=True).returncode
        if report["mount"] == 0:
            look(os.path.join(mounted, name))
            subprocess.run(["umount", mounted])
    subprocess.run(["umount", scratch], capture_output=True)
report["found"] = found
print(json.dumps(report))
"""


def on_server(probe: str, *arguments: str, netns: str = "") -> dict:
    """Run a probe as the server's real root, unconfined but in a mount namespace of its own
    (no user namespace), so that what it mounts goes with it; in network namespace `netns`."""
    enter = ["ip", "netns", "exec", netns] if netns else []
    result = subprocess.run(
        [*enter, "unshare", "--mount", sys.executable, "-", *arguments],
        input=PRELUDE + probe,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@dataclass(frozen=True)
class Host:
    id: str
    address: str
    key: Path

    def probe(self, probe: str, *arguments: str) -> dict:
        """Run a probe in the host as its root."""
        result = subprocess.run(
            ["ssh", "-i", str(self.key), *SSH_OPTIONS, f"root@{self.address}"]
            + [shlex.join(["python3", "-", *arguments])],
            input=PRELUDE + probe,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def run(self, command: str) -> str:
        return inside(self.key, self.address, command)


def node_number(path: str) -> str:
    """major:minor of the device node `path`."""
    rdev = os.stat(path).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def disk_number(path: Path) -> str:
    """major:minor of the block device that holds `path`."""
    device = os.stat(path).st_dev
    return f"{os.major(device)}:{os.minor(device)}"


def plant_node(host_folder: Path, name: str, kind: int, number: str) -> tuple[str, Path]:
    """A world-writable device node put in the host's /root from the server, as if one had got
    in somehow: (its path inside, its path on the server)."""
    on_the_server = host_folder / "root" / "root" / name
    os.mknod(on_the_server, 0o666 | kind, os.makedev(*map(int, number.split(":"))))
    os.chmod(on_the_server, 0o666)
    return f"/root/{name}", on_the_server


def uid_map(text: str) -> tuple[int, ...]:
    """(first id inside, first id on the server, how many) of a one-line /proc/*/uid_map."""
    return tuple(map(int, text.split()))


@pytest.fixture(scope="module")
def fake_cards(tmp_path_factory) -> dict[str, str]:
    """Three cards, char devices 195:N anyone may open, as /dev/nvidiaN are."""
    folder = tmp_path_factory.mktemp("cards")
    devices = {}
    for minor in (0, 1, 2):
        path = folder / f"nvidia{minor}"
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(CARD_MAJOR, minor))
        os.chmod(path, 0o666)
        devices[f"GPU-escape-{minor}"] = str(path)
    return devices


@pytest.fixture(scope="module")
def ssh_key(tmp_path_factory) -> Path:
    key = tmp_path_factory.mktemp("key") / "id_host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    return key


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, host_images, fake_cards, server_network):
    runtime = HostRuntime(
        tmp_path_factory.mktemp("escape") / "state", host_images, lambda: fake_cards, server_network
    )
    yield runtime
    for host_id in runtime.list():
        runtime.remove(host_id)


def start_host(runtime: HostRuntime, key: Path, *cards: str, group: str) -> Host:
    host = DesiredHost(
        id=f"h-esc-{uuid.uuid4().hex[:8]}",
        generation=1,
        state="running",
        card_uuids=cards,
        vcpu=1,
        memory_mib=512,
        data_disk_gb=1,
        ssh_public_keys=(key.with_suffix(".pub").read_text(),),
        network=HostNetwork(group=group),
    )
    runtime.create(host)
    runtime.start(host)
    address = runtime.inspect(host.id).address
    assert ssh_answers(address), (runtime.folder(host.id) / "console.log").read_text()
    return Host(host.id, address, key)


@pytest.fixture(scope="module")
def host(runtime, ssh_key) -> Host:
    """A tenant's host with card 0 (of organization o-1)."""
    return start_host(runtime, ssh_key, "GPU-escape-0", group="o-1")


@pytest.fixture(scope="module")
def other_host(runtime, ssh_key) -> Host:
    """Another tenant's host on the same server, with card 1 (of organization o-2)."""
    return start_host(runtime, ssh_key, "GPU-escape-1", group="o-2")


@pytest.fixture(scope="module")
def other_disk(other_host, runtime) -> str:
    """major:minor of the other host's data disk: a block device of the server (a loop device)
    that holds another tenant's data. The server's own disk would do as well, but some servers
    (virtual machines) keep it closed even to their root, and a probe must work unconfined."""
    return disk_number(runtime.folder(other_host.id) / "data")


def test_a_cgroup_release_agent_cannot_be_set(host):
    """CVE-2022-0492: root that may set a cgroup v1 release_agent runs code as the server's."""
    unconfined = on_server(RELEASE_AGENT_PROBE)
    if not unconfined["mounted"]:
        pytest.skip("no cgroup v1 freezer hierarchy on this server")
    assert unconfined == {"mounted": True, "write": "ok", "unchanged": True}

    confined = host.probe(RELEASE_AGENT_PROBE)
    # Mounting the hierarchy may work (its own cgroup namespace); setting the agent may not.
    assert not confined["mounted"] or confined["write"] in ("EACCES", "EPERM"), confined


def test_device_nodes_cannot_be_made(host, other_disk, fake_cards):
    """With a node of its own the tenant opens any device: a disk, another tenant's card."""
    other_card = node_number(fake_cards["GPU-escape-1"])
    unconfined = on_server(MKNOD_PROBE, other_disk, other_card)
    assert unconfined == {"block": "ok", "char": "ok", "open_block": "ok"}

    confined = host.probe(MKNOD_PROBE, other_disk, other_card)
    assert confined == {"block": "EPERM", "char": "EPERM", "open_block": "ENOENT"}


def test_no_block_device_of_the_server_can_be_opened(host, other_disk, runtime):
    """Not a block device in the host, and one that got in (planted from the server) is refused
    by the host's device cgroup."""
    before = host.probe(DEVICES_PROBE)
    # 0:0 is no device: nspawn's placeholder for what it hides, where it may make one.
    assert [node for node in before if node[1] == "b" and node[2:] != [0, 0]] == []
    assert ["/dev/null", "c", 1, 3] in before  # the walk does see device nodes

    inside_path, server_path = plant_node(
        runtime.folder(host.id), "server-disk", stat.S_IFBLK, other_disk
    )
    try:
        major, minor = map(int, other_disk.split(":"))
        assert [inside_path, "b", major, minor] in host.probe(DEVICES_PROBE)
        assert on_server(OPEN_PROBE, str(server_path)) == {str(server_path): "ok"}
        assert host.probe(OPEN_PROBE, inside_path) == {inside_path: "EPERM"}
    finally:
        server_path.unlink()


def test_a_host_opens_its_own_cards_and_no_other(host, other_host, other_disk, runtime, fake_cards):
    """Its cards, at their own names, the pseudo-devices, and nothing else: not as a node in
    its /dev, not through a node made or planted, not in its device cgroup."""
    own, other = node_number(fake_cards["GPU-escape-0"]), node_number(fake_cards["GPU-escape-1"])
    assert host.run("stat -c %t:%T /dev/nvidia0").strip() == "c3:0"  # hex: 195:0
    assert other_host.run("stat -c %t:%T /dev/nvidia1").strip() == "c3:1"
    cards = [node for node in host.probe(DEVICES_PROBE) if node[2] == CARD_MAJOR]
    assert cards == [["/dev/nvidia0", "c", CARD_MAJOR, 0]]
    assert host.probe(MKNOD_PROBE, other_disk, other)["char"] == "EPERM"

    folder = runtime.folder(host.id)
    own_node, own_on_server = plant_node(folder, "own-card", stat.S_IFCHR, own)
    other_node, other_on_server = plant_node(folder, "other-card", stat.S_IFCHR, other)
    try:
        # No driver serves the fake cards: ENXIO is past every permission check.
        assert on_server(OPEN_PROBE, str(other_on_server)) == {str(other_on_server): "ENXIO"}
        assert host.probe(OPEN_PROBE, own_node, other_node) == {
            own_node: "ENXIO",
            other_node: "EPERM",
        }
    finally:
        own_on_server.unlink()
        other_on_server.unlink()

    devices = [path for path in runtime.cgroups(host.id).dirs if (path / "devices.list").exists()]
    if not devices:
        pytest.skip("no cgroup v1 device controller (cgroup v2: see docs/security.md)")
    allowed = set(devices[0].joinpath("devices.list").read_text().split("\n")) - {""}
    assert allowed == {*BASE_DEVICES, f"c {own} rw"}


def test_kernel_settings_of_the_server_cannot_be_changed(host):
    """core_pattern runs a program as the server's root on a crash; hostname and domainname
    are the server's own. Making /proc/sys writable again inside must not help."""
    settings = [f"/proc/sys/kernel/{name}" for name in ("core_pattern", "hostname", "domainname")]
    server_names = socket.gethostname(), Path(settings[2]).read_text()
    assert all(os.access(path, os.W_OK) for path in settings)
    unconfined = on_server(WRITE_PROBE, "open-only", *settings)
    assert unconfined["writes"] == dict.fromkeys(settings, "ok")

    confined = host.probe(WRITE_PROBE, "write-back", *settings)
    assert all(result in ("EACCES", "EPERM", "EROFS") for result in confined["writes"].values())
    assert (socket.gethostname(), Path(settings[2]).read_text()) == server_names

    # The host's own name is its own to change (its UTS namespace), and only its own.
    name = host.run("hostname").strip()
    assert host.run("hostname escape-probe && hostname").strip() == "escape-probe"
    assert socket.gethostname() == server_names[0]
    host.run(f"hostname {name}")


def test_the_sysrq_trigger_cannot_be_written(host):
    """Writing it crashes, reboots or freezes the server. Only opened, on both sides."""
    if not os.path.exists("/proc/sysrq-trigger"):
        pytest.skip("this server's kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off)")
    unconfined = on_server(WRITE_PROBE, "open-only", "/proc/sysrq-trigger")
    assert unconfined["writes"] == {"/proc/sysrq-trigger": "ok"}

    confined = host.probe(WRITE_PROBE, "open-only", "/proc/sysrq-trigger")
    assert confined["writes"]["/proc/sysrq-trigger"] in ("EACCES", "EPERM", "EROFS", "ENOENT")


def test_kernel_modules_cannot_be_loaded(host):
    """A module is code in the server's kernel."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"no syscall numbers for {platform.machine()}")
    unconfined = on_server(MODULE_PROBE)
    if "EPERM" in unconfined.values():
        pytest.skip(f"this server refuses modules to its own root too: {unconfined}")
    assert "loaded" not in unconfined.values()

    assert host.probe(MODULE_PROBE) == {"finit_module": "EPERM", "init_module": "EPERM"}


def test_the_host_cannot_reconfigure_its_network_or_forge_packets(host, runtime):
    """Its network namespace belongs to the server's user namespace: no other address (another
    host's, to receive its traffic), no raw or packet socket (forged sources, ARP)."""
    netns = runtime.inspect(host.id).extra["netns"]
    spare = host.address.rsplit(".", 1)[0] + ".77"
    unconfined = on_server(NETWORK_PROBE, spare, netns=netns)
    assert unconfined == {"address": "ok", "raw": "ok", "packet": "ok"}

    assert host.probe(NETWORK_PROBE, spare) == {
        "address": "refused",
        "raw": "EPERM",
        "packet": "EPERM",
    }


def test_the_servers_processes_cannot_be_seen_or_signalled(host, other_host):
    """Only the host's own processes, from its PID 1 (sshd): not the server's, not another
    host's."""
    other_host.run("(setsid sleep 614.5 >/dev/null 2>&1 &)")
    with subprocess.Popen(["sleep", "613.25"]) as server_process:
        try:
            pid = str(server_process.pid)
            unconfined = on_server(PROCESSES_PROBE, pid)
            assert unconfined["visible"] and unconfined["kill"] == "ok"
            assert unconfined["processes"][pid] == "sleep 613.25 "
            assert "sleep 614.5 " in unconfined["processes"].values()

            confined = host.probe(PROCESSES_PROBE, pid)
            assert not confined["visible"] and confined["kill"] == "ESRCH"
            assert confined["processes"]["1"].startswith("sshd")
            seen = " | ".join(confined["processes"].values())
            assert "613.25" not in seen and "614.5" not in seen
            assert len(confined["processes"]) < 10, confined["processes"]
        finally:
            server_process.kill()


def test_another_hosts_files_cannot_be_read(host, other_host, other_disk, runtime):
    """A secret in the other host's /root and /data is found by its own root and by the server
    (in its folder, on its data disk), and by no path from this host. Each host's root is its
    own range of ids on the server, never the server's root."""
    name = f"secret-{uuid.uuid4().hex[:8]}"
    secret = uuid.uuid4().hex
    other_host.run(f"echo {secret} > /root/{name} && echo {secret} > /data/{name}")
    folder = runtime.folder(other_host.id)
    at = [str(folder / "upper" / "root" / name), str(folder / "root" / "root" / name)]

    owner = other_host.probe(FILES_PROBE, name, "/", "-")
    assert [f"/root/{name}", f"{secret}\n"] in owner["found"]
    assert [f"/data/{name}", f"{secret}\n"] in owner["found"]
    unconfined = on_server(FILES_PROBE, name, "-", other_disk, *at)
    found = [path for path, text in unconfined["found"] if text == f"{secret}\n"]
    assert set(at) <= set(found) and any(path.endswith(f"/mounted/{name}") for path in found)

    confined = host.probe(FILES_PROBE, name, "/", other_disk, *at)
    assert confined["found"] == [] and confined["mknod"] == "EPERM", confined

    assert Path("/proc/self/uid_map").read_text().split() == ALL_IDS.split()
    first = uid_map(host.run("cat /proc/self/uid_map"))
    second = uid_map(other_host.run("cat /proc/self/uid_map"))
    for inner, outside, count in (first, second):
        assert inner == 0 and outside > 0 and count == 65536
    assert first[1] + first[2] <= second[1] or second[1] + second[2] <= first[1]


def test_links_planted_by_the_tenant_do_not_redirect_the_agents_writes(runtime, ssh_key, tmp_path):
    """At each start the agent writes /etc/resolv.conf and /root/.ssh/authorized_keys into the
    host's root from the server. Links there, pointing at the server's files, must not lead
    it out: the link is replaced, or the start refused."""
    host = start_host(runtime, ssh_key, group="o-3")
    desired = DesiredHost(
        id=host.id,
        generation=2,
        state="running",
        memory_mib=512,
        data_disk_gb=1,
        ssh_public_keys=(ssh_key.with_suffix(".pub").read_text(),),
        network=HostNetwork(group="o-3"),
    )
    server_file = tmp_path / "server-resolv.conf"
    server_file.write_text("the server's own\n")
    server_folder = tmp_path / "server-etc"
    server_folder.mkdir()
    root = runtime.folder(host.id) / "root"

    host.run(f"ln -sf {server_file} /etc/resolv.conf")
    # The attack is live: from the server, the host's file is the server's.
    assert (root / "etc" / "resolv.conf").resolve() == server_file
    runtime.stop(host.id)
    runtime.start(desired)
    assert ssh_answers(host.address)
    assert server_file.read_text() == "the server's own\n"
    assert host.run("stat -c %F /etc/resolv.conf").strip() == "regular file"
    assert "written by loam-agent" in host.run("cat /etc/resolv.conf")

    host.run(f"rm -rf /root/.ssh && ln -s {server_folder} /root/.ssh")
    assert (root / "root" / ".ssh").resolve() == server_folder
    runtime.stop(host.id)
    with pytest.raises(HostError, match=re.escape("/root/.ssh/authorized_keys")):
        runtime.start(desired)
    assert list(server_folder.iterdir()) == []
    runtime.remove(host.id)


def test_a_link_planted_for_the_services_folder_does_not_make_the_agent_remove_server_files(
    runtime, ssh_key, tmp_path
):
    """At each start the agent removes the env files of services no longer in the spec: a
    services folder that is a link to a folder of the server must not lead it there."""
    host = start_host(runtime, ssh_key, group="o-3")
    server_folder = tmp_path / "server-conf"
    server_folder.mkdir()
    (server_folder / "server.env").write_text("the server's own\n")
    host.run(f"mkdir -p /etc/loam && ln -s {server_folder} /etc/loam/services")
    runtime.stop(host.id)
    desired = DesiredHost(
        id=host.id,
        generation=2,
        state="running",
        memory_mib=512,
        data_disk_gb=1,
        ssh_public_keys=(ssh_key.with_suffix(".pub").read_text(),),
        network=HostNetwork(group="o-3"),
    )
    with pytest.raises(HostError, match=re.escape("/etc/loam/services")):
        runtime.start(desired)
    assert [path.name for path in server_folder.iterdir()] == ["server.env"]
    runtime.remove(host.id)


def test_a_setuid_file_on_the_data_disk_is_not_setuid_root_on_the_server(host, runtime):
    """The data disk is id-mapped: the tenant's root owns files as uid 0 of the disk, and the
    server mounts the same disk (state_dir/hosts/<id>/data) as they are. A setuid-root file made
    inside must not be one there, where any user of the server who reaches it may run it."""
    host.run("cp /usr/bin/true /data/setuid-true && chmod 4755 /data/setuid-true")
    on_the_server = runtime.folder(host.id) / "data" / "setuid-true"
    mode = on_the_server.stat()
    options = next(
        line.split()[3].split(",")
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1] == str(runtime.folder(host.id) / "data")
    )
    assert mode.st_uid == 0 and mode.st_mode & stat.S_ISUID  # the probe: it is setuid root
    assert "nosuid" in options and "nodev" in options
    # And no one but root on the server reaches the hosts' folders at all.
    assert stat.S_IMODE(runtime.hosts_dir.stat().st_mode) == 0o700
