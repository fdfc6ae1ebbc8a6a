"""A small, consistent world in the `park` fixture's park, for ordering and operating hosts.

One center region priced for one accelerator model: a spec family of 1/2/4/8-accelerator
flavors, a compatible image, flavor-hour, disk and bandwidth prices, a zero-latency simulator
backend with one pool of two 8-accelerator nodes, and quota limits for the (verified)
organization: 16 accelerators and 10 instances.

Prices are chosen so the figures are easy to check by hand: a flavor costs 1000 minor units an
hour per accelerator, a GB of cloud disk 36 a month (1/20 an hour), a Mbps 720 a month (1 an
hour).
"""

from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.utils import translation

from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Accelerator, Backend, Pool
from apps.orchestration.services import register_node
from apps.orders.models import Instance, Order
from apps.orders.operations import request_operation
from apps.orders.services import HostRequest, submit_create
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

# ssh-keygen would print this for the ed25519 key whose seed is bytes 0..31.
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 tester@laptop"
)
SIZES = (1, 2, 4, 8)
FLAVOR_HOURLY_PER_ACCELERATOR = 1000
DISK_GB_MONTH = 36
BANDWIDTH_MBPS_MONTH = 720
SYSTEM_DISK_GB = 100
NODE_ACCELERATORS = 8
NODE_VCPU = 256
NODE_RAM_GB = 2048


@dataclass
class World:
    park: object
    organization: object
    region: object
    model: object
    family: object
    flavors: dict  # accelerator count -> Flavor
    image: object
    backend: Backend
    pool: Pool
    nodes: list = field(default_factory=list)

    def request(self, accelerators: int = 1, **fields) -> HostRequest:
        """A valid HostRequest for one host of the `accelerators`-sized flavor."""
        values = {
            "flavor": self.flavors[accelerators],
            "image": self.image,
            "region": self.region,
            "system_disk_gb": SYSTEM_DISK_GB,
            "ssh_public_key": SSH_KEY,
            "name": "gpu-host",
            **fields,
        }
        return HostRequest(**values)

    def add_node(self, hostname: str, *, pool=None, accelerators=NODE_ACCELERATORS, **shape):
        node = register_node(
            pool=pool or self.pool,
            hostname=hostname,
            accelerators=accelerators,
            vcpu=shape.get("vcpu", NODE_VCPU),
            ram_gb=shape.get("ram_gb", NODE_RAM_GB),
        )
        self.nodes.append(node)
        return node

    def set_limit(self, resource: str, limit: int, *, organization=True, model=None):
        """Create or change one quota limit (the organization's, or the park's)."""
        QuotaLimit.objects.update_or_create(
            park=self.park,
            organization=self.organization if organization else None,
            resource=resource,
            accelerator_model=model,
            defaults={"limit": limit},
        )

    def price_flavors(self, region, *, per_accelerator=FLAVOR_HOURLY_PER_ACCELERATOR):
        for count, flavor in self.flavors.items():
            PriceFactory(region=region, flavor=flavor, amount_minor=per_accelerator * count)

    # --- what the world holds now -----------------------------------------------------------

    def free_accelerators(self, node=None) -> int:
        devices = Accelerator.objects.filter(node__pool__backend__park=self.park)
        if node is not None:
            devices = devices.filter(node=node)
        return devices.filter(allocation__isnull=True).count()

    def total_accelerators(self) -> int:
        return Accelerator.objects.filter(node__pool__backend__park=self.park).count()


@pytest.fixture
def world(park, organization) -> World:
    Organization = type(organization)
    Organization.objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    organization.refresh_from_db()
    assert organization.is_verified and organization.legal_name and organization.credit_code

    region = RegionFactory(park=park, code="center", name="Center", latency_ms=0)
    model = AcceleratorModelFactory(fp16_tflops=Decimal("312.0"))  # 3.12 compute units each
    family = FlavorFamilyFactory(park=park, accelerator_model=model, code="g1", name="G1")
    flavors = {
        count: FlavorFactory(
            family=family,
            code=f"g1.{count}x",
            accelerator_count=count,
            vcpu=16 * count,
            ram_gb=128 * count,
            system_disk_gb=SYSTEM_DISK_GB,
        )
        for count in SIZES
    }
    image = ImageFactory(park=park, code="ubuntu-cuda", compatible_accelerators=[model])
    backend = BackendFactory(park=park, name="sim", driver="simulator", config={})
    pool = PoolFactory(backend=backend, region=region, accelerator_model=model, name="pool-a")
    built = World(
        park=park,
        organization=organization,
        region=region,
        model=model,
        family=family,
        flavors=flavors,
        image=image,
        backend=backend,
        pool=pool,
    )
    built.price_flavors(region)
    PriceFactory(region=region, disk=True, amount_minor=DISK_GB_MONTH)
    PriceFactory(region=region, bandwidth=True, amount_minor=BANDWIDTH_MBPS_MONTH)
    built.add_node("node-a")
    built.add_node("node-b")
    built.set_limit(QuotaResource.ACCELERATORS, 16)
    built.set_limit(QuotaResource.INSTANCES, 10)
    return built


@pytest.fixture
def host_request(world):
    """host_request(accelerators=1, **fields) -> a valid HostRequest in the world."""
    return world.request


@pytest.fixture
def order_hosts(world, owner, django_capture_on_commit_callbacks):
    """order_hosts(accelerators=1, actor=owner, run_tasks=True, idempotency_key="", **fields)
    submits a create order and (unless run_tasks=False) runs its provisioning task."""

    def order(
        accelerators=1, *, actor=None, run_tasks=True, idempotency_key="", request=None, **fields
    ) -> list[Order]:
        with django_capture_on_commit_callbacks(execute=run_tasks):
            orders = submit_create(
                organization=world.organization,
                actor=actor or owner,
                request=request or world.request(accelerators, **fields),
                idempotency_key=idempotency_key,
            )
        return [Order.objects.get(pk=o.pk) for o in orders]

    return order


@pytest.fixture
def running_host(order_hosts):
    """running_host(accelerators=1, **fields) -> a provisioned, running Instance."""

    def make(accelerators=1, **fields) -> Instance:
        (order,) = order_hosts(accelerators, **fields)
        instance = Instance.objects.get(pk=order.instance_id)
        assert instance.state == "running", instance.error_message
        return instance

    return make


@pytest.fixture
def operate(owner, django_capture_on_commit_callbacks):
    """operate(instance, kind, actor=owner, run_tasks=True, idempotency_key="", **params)
    requests a lifecycle operation and (unless run_tasks=False) runs its task."""

    def run(instance, kind, *, actor=None, run_tasks=True, idempotency_key="", **params):
        with django_capture_on_commit_callbacks(execute=run_tasks):
            order = request_operation(
                instance=instance,
                actor=actor or owner,
                kind=kind,
                params=params,
                idempotency_key=idempotency_key,
            )
        return Order.objects.get(pk=order.pk)

    return run


@pytest.fixture
def english_messages():
    """Messages are checked in English (the portal's default language is zh-hans); the test
    modules of this world use it with `pytest.mark.usefixtures("english_messages")`."""
    with translation.override("en"):
        yield


@pytest.fixture(autouse=True)
def _no_injected_failures():
    """Failures injected into the simulator never leak from one test into the next."""
    SimulatorDriver.clear_injected()
    yield
    SimulatorDriver.clear_injected()


@pytest.fixture
def other_family(world):
    """A second spec family of the same accelerator model, in the same park and region."""
    family = FlavorFamilyFactory(
        park=world.park, accelerator_model=world.model, code="g2", name="G2"
    )
    flavor = FlavorFactory(
        family=family, code="g2.2x", accelerator_count=2, vcpu=32, ram_gb=256, system_disk_gb=100
    )
    PriceFactory(region=world.region, flavor=flavor, amount_minor=2100)
    return flavor
