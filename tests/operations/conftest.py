"""A small park for the operator console's tests: a verified organization with an owner, one
center region with a priced 1/2/4-accelerator family, a simulator backend with one pool of two
8-accelerator nodes, and helpers to run hosts on it and to feed the backend's telemetry."""

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from apps.orchestration.backends import registry
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.backends.slurm.client import endpoint_of
from apps.orchestration.models import Allocation, Backend, Node, Pool
from apps.orchestration.services import probe_backend, register_node
from apps.orders.models import Instance
from apps.orders.services import HostRequest, submit_create
from apps.quotas.models import QuotaLimit
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

SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 tester@laptop"
)


@dataclass
class Console:
    park: object
    organization: object
    region: object
    model: object
    family: object
    flavors: dict
    image: object
    backend: Backend
    pool: Pool
    nodes: list

    def request(self, accelerators=1, name="gpu-host") -> HostRequest:
        return HostRequest(
            flavor=self.flavors[accelerators],
            image=self.image,
            region=self.region,
            system_disk_gb=100,
            ssh_public_key=SSH_KEY,
            name=name,
        )


@pytest.fixture(autouse=True)
def english(client):
    """Pages in English, and the services' messages too (whatever ran before in the process)."""
    client.cookies["django_language"] = "en"
    with translation.override("en"):
        yield


@pytest.fixture
def console(park, organization) -> Console:
    type(organization).objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    organization.refresh_from_db()
    region = RegionFactory(park=park, code="center", name="Center")
    model = AcceleratorModelFactory(name="Test H1", slug="test-h1", tdp_w=700)
    family = FlavorFamilyFactory(park=park, accelerator_model=model, code="h1", name="H1")
    flavors = {
        n: FlavorFactory(family=family, code=f"h1.{n}x", accelerator_count=n, vcpu=8 * n)
        for n in (1, 2, 4)
    }
    for n, flavor in flavors.items():
        PriceFactory(region=region, flavor=flavor, amount_minor=1000 * n)
    image = ImageFactory(park=park, code="ubuntu-cuda", compatible_accelerators=[model])
    backend = BackendFactory(park=park, name="sim", driver="simulator", config={})
    pool = PoolFactory(backend=backend, region=region, accelerator_model=model, name="pool-a")
    nodes = [
        register_node(pool=pool, hostname=h, accelerators=8, vcpu=256, ram_gb=4096)
        for h in ("node-a", "node-b")
    ]
    QuotaLimit.objects.create(
        park=park, organization=organization, resource="accelerators", limit=64
    )
    QuotaLimit.objects.create(park=park, organization=organization, resource="instances", limit=50)
    return Console(park, organization, region, model, family, flavors, image, backend, pool, nodes)


@pytest.fixture
def running(console, owner, django_capture_on_commit_callbacks):
    """running(accelerators=1, name=...) -> a host ordered by the owner and provisioned."""

    def make(accelerators=1, name="gpu-host") -> Instance:
        with django_capture_on_commit_callbacks(execute=True):
            (order,) = submit_create(
                organization=console.organization,
                actor=owner,
                request=console.request(accelerators, name=name),
            )
        instance = Instance.objects.select_related("node").get(pk=order.instance_id)
        assert instance.state == "running", instance.error_message
        return instance

    return make


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """`with commit():` runs the block's after-commit work (backend calls, mail) at its end."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def telemetry(console):
    """telemetry({hostname: {index: pct}}, idle_for=minutes): the simulator reports these
    readings `idle_for` minutes ago and again now (so what read idle then has been idle since),
    and the hosts running now have held their accelerators since then; devices not named read
    busy."""

    def feed(utilization: dict, *, idle_for: int = 0, idle_share: float = 0.0):
        config = {"utilization": utilization, "idle_share": idle_share}
        Backend.objects.filter(pk=console.backend.pk).update(config=config)
        now = timezone.now()
        if idle_for:
            Allocation.objects.filter(node__pool=console.pool, released_at__isnull=True).update(
                created_at=now - timedelta(minutes=idle_for)
            )
            probe_backend(backend=console.backend, now=now - timedelta(minutes=idle_for))
        probe_backend(backend=console.backend, now=now)
        return list(Node.objects.filter(pool=console.pool).order_by("hostname"))

    return feed


def devices_of(instance) -> list[int]:
    allocation = instance.workload.allocations.get(released_at__isnull=True)
    return sorted(allocation.accelerators.values_list("index", flat=True))


class RemoteDriver(SimulatorDriver):
    """A simulator that names the cluster its config reaches (`url`), as the Slurm driver does."""

    name = "remote"

    @staticmethod
    def endpoint(config):
        return endpoint_of(config["url"])


@pytest.fixture
def remote_driver(monkeypatch):
    """The `remote` driver, offered for the test."""
    monkeypatch.setitem(registry._DRIVERS, RemoteDriver.name, RemoteDriver)
    return RemoteDriver
