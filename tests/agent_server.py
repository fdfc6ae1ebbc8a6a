"""A real GPU server for the portal, on this machine: `loam-agent` enrolled in a pool with a join
token, its cards a fake libnvidia-ml.so.1 (tests/agent/fake_nvml, built with gcc) bound into
hosts as character devices 195:N, its hosts systemd-nspawn containers (deploy/agent/).

Shared by the browser journey (tests/e2e/test_agent_host_journey.py) and bench/agent_hosts.py.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FAKE_NVML = Path(__file__).resolve().parent / "agent" / "fake_nvml" / "fake_nvml.c"
# The checkout's agent, whichever one `pip install` put in the environment.
AGENT_SOURCE = Path(__file__).resolve().parents[1] / "agent"
FAKE_NVIDIA_SMI = FAKE_NVML.with_name("fake_nvidia_smi.c")
IMAGE = "debian-12"
# As the recipes describe them (agent/loam_agent/hosts/recipes/).
IMAGE_NAMES = {
    "debian-12": "Debian 12 (bookworm) · Python 3.11",
    "pytorch": "PyTorch 2.13 · Python 3.11 · JupyterLab",
}
IMAGE_DIR = os.environ.get("LOAM_AGENT_IMAGE_DIR", "/var/cache/loam-agent/images")


def missing_for_hosts(image: str = IMAGE) -> str:
    """Why real hosts of `image` can't run here ('' when they can)."""
    if os.geteuid() != 0:
        return "container hosts need root"
    for tool in ("systemd-nspawn", "gcc", "ssh", "ssh-keygen"):
        if not shutil.which(tool):
            return f"{tool} is not installed (deploy/agent/install.sh)"
    if not (Path(IMAGE_DIR) / image / "rootfs").is_dir():
        return f"the host image {image} is not built in {IMAGE_DIR} (loam-agent image build)"
    return ""


def require_hosts(image: str = IMAGE) -> None:
    """Skip the calling test where real hosts of `image` can't run here, but fail it in CI
    (LOAM_REQUIRE_SERVICES=1): CI must not pass by skipping the real thing."""
    import pytest

    if missing := missing_for_hosts(image):
        if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"CI must run real container hosts: {missing}")
        pytest.skip(missing)


@dataclass
class AgentPark:
    organization: object
    owner: object
    operator: object
    flavor: object  # one card; the family also has a two-card flavor
    image: object
    region: object
    pool: object


def build_agent_park(*, quota: int, image: str = IMAGE) -> AgentPark:
    """A verified organization (owner, quota of `quota` hosts and cards), an agent backend with
    one pool, a one-card flavor (1 vCPU, 1 GB) and a two-card one of its family priced in the
    pool's region, the agent's image `image`."""
    from apps.quotas.models import QuotaLimit
    from tests.factories import (
        AcceleratorModelFactory,
        BackendFactory,
        FlavorFactory,
        ImageFactory,
        MembershipFactory,
        OrganizationFactory,
        ParkOperatorFactory,
        PoolFactory,
        PriceFactory,
        RegionFactory,
        UserFactory,
    )

    organization = OrganizationFactory(verification_state="verified")
    owner = UserFactory()
    MembershipFactory(organization=organization, user=owner, role="owner")
    park = organization.park
    operator = UserFactory()
    ParkOperatorFactory(park=park, user=operator)
    region = RegionFactory(park=park)
    model = AcceleratorModelFactory()
    flavor = FlavorFactory(
        family__park=park, family__accelerator_model=model, accelerator_count=1, vcpu=1, ram_gb=1
    )
    image = ImageFactory(park=park, code=image, name=IMAGE_NAMES.get(image, image), os="Debian 12")
    image.compatible_accelerators.add(model)
    PriceFactory(flavor=flavor, region=region, amount_minor=1000)
    larger = FlavorFactory(family=flavor.family, accelerator_count=2, vcpu=2, ram_gb=2)
    PriceFactory(flavor=larger, region=region, amount_minor=2000)
    pools = [{"name": "agents", "accelerator_model": model.slug}]
    backend = BackendFactory(park=park, driver="agent", config={"pools": pools})
    pool = PoolFactory(backend=backend, region=region, name="agents", accelerator_model=model)
    for resource in ("accelerators", "instances"):
        QuotaLimit.objects.create(
            park=park, organization=organization, resource=resource, limit=quota
        )
    return AgentPark(
        organization=organization,
        owner=owner,
        operator=operator,
        flavor=flavor,
        image=image,
        region=region,
        pool=pool,
    )


@dataclass
class AgentServer:
    process: subprocess.Popen
    state_dir: Path
    log: Path

    def stop(self) -> None:
        """Stop the agent, and remove the hosts it left running (hosts outlive their agent)
        and their rules."""
        from loam_agent.hosts.network import TABLE, ServerNetwork
        from loam_agent.hosts.runtime import HostRuntime

        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        runtime = HostRuntime(self.state_dir, Path(IMAGE_DIR), dict, ServerNetwork("lo", None))
        for host_id in runtime.list():
            runtime.remove(host_id)
        subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True)

    def host_folders(self) -> list[str]:
        return sorted(path.name for path in (self.state_dir / "hosts").glob("*"))


def card_uuid(index: int) -> str:
    """The fake NVML's uuid of card `index`."""
    return f"GPU-fa4e0000-0000-0000-0000-{index:012d}"


def install_fake_driver(folder: Path) -> tuple[Path, Path]:
    """The fake NVML installed in `folder` as a driver is, for hosts to be given (its cards:
    the devices a host has): the real file and its soname link, listed in a loader cache of its
    own (the system's stays as it is), and `nvidia-smi -L` in folder/bin. -> (cache, bin)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    real = folder / "libnvidia-ml.so.550.54.15"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-DFAKE_NVML_FROM_DEVICES", "-Wl,-soname,libnvidia-ml.so.1"]
        + ["-o", real, FAKE_NVML],
        check=True,
    )
    (folder / "libnvidia-ml.so.1").symlink_to(real.name)
    tools = folder / "bin"
    tools.mkdir()
    smi = ["gcc", "-o", tools / "nvidia-smi", FAKE_NVIDIA_SMI, "-L", folder, "-l:libnvidia-ml.so.1"]
    subprocess.run(smi, check=True)
    cache, conf = folder / "ld.so.cache", folder / "ld.so.conf"
    conf.write_text(f"{folder}\n")
    # -X: no links made in the system's folders, which ldconfig scans too.
    subprocess.run(["ldconfig", "-X", "-C", cache, "-f", conf], check=True)
    return cache, tools


def fake_cards(work: Path, cards: int) -> dict[str, str]:
    """The environment in which an agent finds `cards` cards: the fake NVML (built into
    `work`), a character device 195:N per card, the fake driver for its hosts and the host
    image's cache."""
    library = work / "nvml"
    library.mkdir(parents=True)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", library / "libnvidia-ml.so.1", FAKE_NVML], check=True
    )
    devices = {}
    for index in range(cards):
        device = work / f"nvidia{index}"
        os.mknod(device, 0o666 | 0o020000, os.makedev(195, index))
        devices[card_uuid(index)] = str(device)
    driver_cache, driver_tools = install_fake_driver(work / "driver")
    return {
        "LD_LIBRARY_PATH": str(library),
        "FAKE_NVML_GPUS": str(cards),
        "FAKE_NVML_POWER_W": "231",
        "LOAM_AGENT_CARD_DEVICES": json.dumps(devices),
        "LOAM_AGENT_LDCONFIG_CACHE": str(driver_cache),
        "PATH": f"{driver_tools}:{os.environ['PATH']}",
        "LOAM_AGENT_IMAGE_DIR": IMAGE_DIR,
    }


def network_config(uplink: str = "", public_address: str = "") -> str:
    """agent.toml's lines that face the server's uplink to the outside world
    (tests/outside_world.py, which must be up), with quick polls for tests: this machine's
    uplink and public address unless others are named (a partner's server)."""
    from tests.outside_world import OUTSIDE_ADDRESS, PUBLIC_ADDRESS, UPLINK

    return (
        f'sample_interval_s = 2\nhosts_poll_interval_s = 0.5\nuplink = "{uplink or UPLINK}"\n'
        f'public_address = "{public_address or PUBLIC_ADDRESS}"\n'
        f'dns_servers = ["{OUTSIDE_ADDRESS}"]\n'
    )


def start_agent_server(*, pool, operator, portal_url: str, work: Path, cards: int) -> AgentServer:
    """Issue a join token for `pool`, enrol a real agent with it, start `loam-agent run`. The
    server's uplink and public address face the outside world (tests/outside_world.py), which
    must be up."""
    from apps.agents.services import issue_join_token

    _token, secret = issue_join_token(pool=pool, operator=operator)
    return run_agent_server(join_token=secret, portal_url=portal_url, work=work, cards=cards)


def run_agent_server(
    *, join_token: str, portal_url: str, work: Path, cards: int, ca_bundle: str = ""
) -> AgentServer:
    """Enrol a real agent with `join_token` and start `loam-agent run` against `portal_url`
    (trusting `ca_bundle`, a portal with a private CA's certificate, where given)."""
    work.mkdir(parents=True, exist_ok=True)
    state_dir = work / "state"
    config = work / "agent.toml"
    trust = f'ca_bundle = "{ca_bundle}"\n' if ca_bundle else ""
    config.write_text(
        f'portal_url = "{portal_url}"\ncredential_path = "{work / "credential.json"}"\n'
        f'state_dir = "{state_dir}"\n' + trust + network_config()
    )
    env = {**os.environ, **fake_cards(work, cards), "PYTHONPATH": str(AGENT_SOURCE)}
    agent = [sys.executable, "-m", "loam_agent", "--config", str(config)]
    subprocess.run([*agent, "enrol", "--token", join_token], env=env, check=True)
    log = work / "agent.log"
    process = subprocess.Popen(
        [*agent, "run"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    return AgentServer(process=process, state_dir=state_dir, log=log)


def ssh_answers(
    access: dict, key: Path, command: str = "true", *, from_outside: bool = True
) -> subprocess.CompletedProcess:
    """Run `command` as the tenant would with `key`, through the instance's `access`
    (`ssh -p <ssh_port> root@<address>`), from the outside world by default (no host key
    checks: each host is new)."""
    ssh = ["ssh", "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"]
    ssh += ["-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=2", "-q"]
    ssh += ["-p", str(access.get("ssh_port") or 22), f"{access.get('ssh_user') or 'root'}@"]
    ssh[-1] += access["address"]
    if from_outside:
        from tests.outside_world import OUTSIDE

        ssh = ["ip", "netns", "exec", OUTSIDE, *ssh]
    return subprocess.run([*ssh, command], capture_output=True, text=True, timeout=15)
