"""A park with one agent backend: a pool that enrolled servers join, a priced spec family of
1/2/4/8-card flavors and an image, a verified organization with quotas; helpers to enrol a
server (the real service), build the agent's requests as docs/agent-protocol.md shows them,
and a fake agent that talks to the real agent API and converges at once."""

import base64
import copy
import itertools
import struct
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.utils import translation

from apps.agents import services
from apps.quotas.models import QuotaLimit, QuotaResource
from apps.tenants.models import VerificationState
from tests.factories import (
    AcceleratorModelFactory,
    BackendFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 t@l"
AGENT_VERSION = "0.1.0"
# The `sequence` of the tests' next host report: it only grows, as an agent's does.
next_report_sequence = itertools.count(1).__next__


def card(index: int, **changes) -> dict:
    return {
        "vendor": "nvidia",
        "index": index,
        "uuid": f"GPU-{index:08d}-aaaa-bbbb-cccc-000000000000",
        "model": "NVIDIA H200",
        "memory_total_mib": 143771,
        "device_path": f"/dev/nvidia{index}",
        **changes,
    }


def sample(uuid: str, **changes) -> dict:
    return {
        "uuid": uuid,
        "utilization_pct": 37,
        "memory_used_mib": 20480,
        "power_w": 312.5,
        "temperature_c": 54,
        "ecc_errors_uncorrected": 0,
        "health": "ok",
        "health_message": "",
        **changes,
    }


READERS = [
    {"vendor": "nvidia", "state": "ok", "message": "driver 550.54.15"},
    {"vendor": "ascend", "state": "not_present", "message": "no npu-smi"},
]


def server_facts(hostname: str = "gpu-07", **changes) -> dict:
    return {
        "hostname": hostname,
        "os": "Debian GNU/Linux 12 (bookworm)",
        "kernel": "6.1.0-27-amd64",
        "arch": "x86_64",
        "cpu_count": 64,
        "memory_total_mib": 515896,
        "agent_version": AGENT_VERSION,
        **changes,
    }


def enrol_body(token: str, *, hostname: str = "gpu-07", cards: int = 8, **server) -> dict:
    return {
        "join_token": token,
        "server": server_facts(hostname, **server),
        "readers": copy.deepcopy(READERS),
        "cards": [card(i) for i in range(cards)],
    }


def heartbeat_body(cards: list[dict], samples: list[dict] | None = None, **changes) -> dict:
    return {
        "agent_version": AGENT_VERSION,
        "taken_at": "2026-12-02T10:00:05.123456Z",
        "readers": copy.deepcopy(READERS),
        "cards": cards,
        "samples": [sample(c["uuid"]) for c in cards] if samples is None else samples,
        **changes,
    }


@dataclass
class AgentWorld:
    park: object
    organization: object
    region: object
    model: object
    flavors: dict
    image: object
    backend: object
    pool: object
    operator: object
    servers: list = field(default_factory=list)

    def enrol(self, hostname: str = "gpu-07", cards: int = 8, **server):
        """Enrol a server with `cards` cards in the pool: (AgentServer, credential)."""
        _token, secret = services.issue_join_token(pool=self.pool, operator=self.operator)
        enrolled = services.enrol_server(
            token=secret,
            server=server_facts(hostname, **server),
            readers=copy.deepcopy(READERS),
            cards=[card(i) for i in range(cards)],
        )
        self.servers.append(enrolled[0])
        return enrolled


@pytest.fixture
def agent_world(park, organization, operator) -> AgentWorld:
    type(organization).objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    organization.refresh_from_db()
    region = RegionFactory(park=park, code="edge", name="Edge", latency_ms=0)
    model = AcceleratorModelFactory(slug="h200-sxm", fp16_tflops=Decimal("989.5"))
    family = FlavorFamilyFactory(park=park, accelerator_model=model, code="a1", name="A1")
    flavors = {
        count: FlavorFactory(
            family=family,
            code=f"a1.{count}x",
            accelerator_count=count,
            vcpu=8 * count,
            ram_gb=64 * count,
            system_disk_gb=50,
        )
        for count in (1, 2, 4, 8)
    }
    for count, flavor in flavors.items():
        PriceFactory(region=region, flavor=flavor, amount_minor=1000 * count)
    PriceFactory(region=region, disk=True, amount_minor=36)
    PriceFactory(region=region, bandwidth=True, amount_minor=720)
    image = ImageFactory(park=park, code="debian-12", compatible_accelerators=[model])
    backend = BackendFactory(
        park=park,
        name="agents",
        driver="agent",
        config={"pools": [{"name": "agent-pool", "accelerator_model": "h200-sxm"}]},
    )
    pool = PoolFactory(backend=backend, region=region, accelerator_model=model, name="agent-pool")
    for resource, limit in ((QuotaResource.ACCELERATORS, 32), (QuotaResource.INSTANCES, 10)):
        QuotaLimit.objects.create(
            park=park, organization=organization, resource=resource, limit=limit
        )
    return AgentWorld(
        park=park,
        organization=organization,
        region=region,
        model=model,
        flavors=flavors,
        image=image,
        backend=backend,
        pool=pool,
        operator=operator,
    )


@pytest.fixture
def english_messages():
    with translation.override("en"):
        yield


def ed25519_public_key(seed: bytes) -> str:
    """A well-formed OpenSSH ed25519 public key line made of `seed` (up to 32 bytes)."""
    name = b"ssh-ed25519"
    point = seed.ljust(32, b"\0")[:32]
    blob = struct.pack(">I", len(name)) + name + struct.pack(">I", len(point)) + point
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


# What every host of a FakeAgent's presents over SSH (loam-agent reads it with ssh-keyscan).
HOST_KEY = ed25519_public_key(b"fake agent host")
SAVED_DIGEST, SAVED_SIZE = "sha256:" + "5a" * 32, 2_500_000_000  # billed as 3 GB


class FakeAgent:
    """The agent's side over the real agent API (Django's test client): heartbeats, and
    `converge()`, which polls the hosts and reports each as what the portal wants at once."""

    def __init__(self, client, credential: str, cards: list[dict]):
        self.client = client
        self.credential = credential
        self.cards = cards
        self.known: dict[str, int] = {}  # host id -> last generation seen
        self.fail_next: dict[str, str] = {}  # host id -> message: report `failed` once

    def headers(self) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.credential}"}

    def post(self, path: str, body: dict):
        # A request through the test client activates the language it negotiates, for good:
        # the test's own (english_messages) is kept.
        with translation.override(translation.get_language()):
            return self.client.post(
                f"/api/v1/agent/{path}", body, content_type="application/json", **self.headers()
            )

    def heartbeat(self, samples: list[dict] | None = None):
        response = self.post("heartbeat", heartbeat_body(self.cards, samples))
        assert response.status_code == 204, response.content
        return response

    def hosts(self) -> list[dict]:
        with translation.override(translation.get_language()):
            response = self.client.get("/api/v1/agent/hosts", **self.headers())
        assert response.status_code == 200, response.content
        return response.json()["hosts"]

    def converge(self) -> list[dict]:
        listed = self.hosts()
        reports = []
        for n, host in enumerate(listed, start=2):
            self.known[host["id"]] = host["generation"]
            if host["id"] in self.fail_next:
                message = self.fail_next.pop(host["id"])
                reports.append(
                    {"id": host["id"], "generation": host["generation"], "state": "failed",
                     "address": None, "ssh_port": None, "message": message}
                )  # fmt: skip
                continue
            running = host["state"] == "running"
            # A stopped host's root saved as asked, as the real agent reports it.
            saved = (
                {"saved_image": {"name": code, "digest": SAVED_DIGEST, "size_bytes": SAVED_SIZE}}
                if (code := host.get("save_image"))
                else {}
            )
            reports.append(
                {
                    "id": host["id"],
                    "generation": host["generation"],
                    "state": host["state"],
                    "address": f"10.213.7.{n}" if running else None,
                    "ssh_port": 22 if running else None,
                    "message": "",
                    "ssh_host_keys": [HOST_KEY] if running else [],
                    **saved,
                }
            )
        gone = set(self.known) - {host["id"] for host in listed}
        for host_id in gone:
            reports.append(
                {"id": host_id, "generation": self.known.pop(host_id), "state": "removed"}
            )
        if reports:
            response = self.post(
                "hosts/report", {"sequence": next_report_sequence(), "hosts": reports}
            )
            assert response.status_code == 204, response.content
        return reports


@pytest.fixture
def fake_agent(client):
    def make(credential: str, cards: int = 8) -> FakeAgent:
        return FakeAgent(client, credential, [card(i) for i in range(cards)])

    return make


@pytest.fixture
def converging(monkeypatch):
    """converging(agent): each follow-up look of a host job first lets the agent converge
    (as a real one would while the job waits), then looks at once."""

    def install(agent: FakeAgent) -> FakeAgent:
        def send_later(job, follow_job, args, *, countdown):
            agent.converge()
            follow_job.apply(args)

        monkeypatch.setattr("apps.orders.tasks._send_later", send_later)
        return agent

    return install
