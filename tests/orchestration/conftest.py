"""A park for training tasks, in the `park` fixture's park: two NVIDIA models (a fast H100 and
a slower A10, both CUDA, so one image runs on both), regions with flavor prices per model, a
simulator backend whose tasks run for an hour unless a test says otherwise, and helpers to add
pools and nodes, submit tasks and run queue passes.

Prices are per accelerator-hour (the one-card flavor of the model in the region), so a task's
price is easy to check: price × accelerator_milli / 1000, rounded half up.
"""

from dataclasses import dataclass, field
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.utils import translation

from apps.catalog.models import ResourceType
from apps.orchestration.backends.simulator import SimulatorDriver
from apps.orchestration.models import Accelerator, Allocation, Task
from apps.orchestration.scheduling import schedule_queue_pass, submit_task
from apps.orchestration.services import register_node
from apps.tenants.models import VerificationState
from tests.factories import (
    AcceleratorModelFactory,
    BackendFactory,
    FlavorFactory,
    FlavorFamilyFactory,
    ImageFactory,
    OrganizationFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)


@dataclass
class TaskWorld:
    park: object
    organization: object
    owner: object
    east: object
    west: object
    h100: object
    a10: object
    image: object
    backend: object
    pools: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)

    def price(self, region, model, amount_minor, *, accelerators=1, resource_type=None):
        family = FlavorFamilyFactory(
            park=self.park,
            accelerator_model=model,
            resource_type=resource_type or ResourceType.TRAINING_TASK,
        )
        flavor = FlavorFactory(
            family=family, accelerator_count=accelerators, vcpu=8 * accelerators, ram_gb=32
        )
        return PriceFactory(region=region, flavor=flavor, amount_minor=amount_minor)

    def pool(self, name, *, region, model, price=None, pue="1.30", carbon=550):
        pool = PoolFactory(
            backend=self.backend,
            region=region,
            accelerator_model=model,
            name=name,
            pue=Decimal(pue),
            carbon_g_per_kwh=carbon,
        )
        if price is not None:
            self.price(region, model, price)
        self.pools[name] = pool
        return pool

    def node(self, hostname, *, pool, accelerators=8, vcpu=128, ram_gb=1024):
        node = register_node(
            pool=self.pools[pool] if isinstance(pool, str) else pool,
            hostname=hostname,
            accelerators=accelerators,
            vcpu=vcpu,
            ram_gb=ram_gb,
        )
        self.nodes[hostname] = node
        return node

    def submit(self, organization=None, actor=None, **fields) -> Task:
        data = {
            "name": "train",
            "image": self.image,
            "command": "python train.py",
            "accelerator_milli": 1000,
            "vcpu": 8,
            "ram_gb": 32,
            **fields,
        }
        return submit_task(
            organization=organization or self.organization, actor=actor or self.owner, data=data
        )

    def schedule(self, **kwargs):
        return schedule_queue_pass(park=self.park, **kwargs)

    def free_cards(self, node) -> int:
        return Accelerator.objects.filter(node=node, allocation__isnull=True).count()

    def share_used(self, card) -> int:
        return sum(
            Allocation.objects.filter(
                shared_accelerator=card, released_at__isnull=True
            ).values_list("share_milli", flat=True)
        )


@pytest.fixture
def task_world(park, organization, owner) -> TaskWorld:
    type(organization).objects.filter(pk=organization.pk).update(
        verification_state=VerificationState.VERIFIED
    )
    organization.refresh_from_db()
    east = RegionFactory(park=park, code="east", name="East", latency_ms=10)
    west = RegionFactory(park=park, code="west", name="West", province=True, latency_ms=10)
    h100 = AcceleratorModelFactory(
        name="H100", slug="h100", fp16_tflops=Decimal("989.5"), tdp_w=700
    )
    a10 = AcceleratorModelFactory(name="A10", slug="a10", fp16_tflops=Decimal("125.0"), tdp_w=150)
    image = ImageFactory(park=park, code="pytorch", compatible_accelerators=[h100, a10])
    backend = BackendFactory(
        park=park, name="sim", driver="simulator", config={"task_seconds": 3600, "seed": 7}
    )
    world = TaskWorld(
        park=park,
        organization=organization,
        owner=owner,
        east=east,
        west=west,
        h100=h100,
        a10=a10,
        image=image,
        backend=backend,
    )
    world.pool("east-h100", region=east, model=h100, price=2000)
    world.node("h1", pool="east-h100")
    return world


@pytest.fixture
def grid(park):
    """One region of one park, one pool of H100 nodes (none yet): placement's test bed."""
    model = AcceleratorModelFactory(name="H100", slug="h100")
    backend = BackendFactory(park=park)
    center = RegionFactory(park=park, code="center", name="Center", latency_ms=0)
    pool = PoolFactory(backend=backend, region=center, accelerator_model=model, name="main")
    return SimpleNamespace(
        park=park,
        model=model,
        backend=backend,
        center=center,
        pool=pool,
        organization=OrganizationFactory(park=park),
    )


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):
        yield


@pytest.fixture(autouse=True)
def _no_injected_failures():
    SimulatorDriver.clear_injected()
    yield
    SimulatorDriver.clear_injected()
