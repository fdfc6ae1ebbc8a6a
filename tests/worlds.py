"""A small park that sells one flavor, for tests that run outside the usual fixtures (real
threads, a real worker): verified organization with an owner, a region, a priced flavor, an
image for it, a simulator pool of nodes, and an accelerator quota."""

from dataclasses import dataclass

from apps.orchestration.models import Pool
from apps.orchestration.services import register_node
from apps.orders.services import HostRequest
from apps.quotas.models import QuotaLimit
from apps.tenants.models import Organization
from tests.factories import (
    BackendFactory,
    FlavorFactory,
    ImageFactory,
    MembershipFactory,
    OrganizationFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
    UserFactory,
)

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb0bbMkVQzCQ0yt4WzQp2jr0+Ir3ZXD9gDQsG2dLR5N ci@loam"


@dataclass(frozen=True)
class World:
    organization: Organization
    owner: object
    request: HostRequest
    pool: Pool


def sellable_world(
    *,
    accelerator_quota: int = 16,
    nodes: int = 1,
    per_node: int = 8,
    accelerators: int = 1,
    backend_config: dict | None = None,
) -> World:
    organization = OrganizationFactory(verification_state="verified")
    owner = UserFactory()
    MembershipFactory(organization=organization, user=owner, role="owner")
    park = organization.park
    region = RegionFactory(park=park)
    flavor = FlavorFactory(
        family__park=park,
        accelerator_count=accelerators,
        vcpu=4 * accelerators,
        ram_gb=16 * accelerators,
    )
    image = ImageFactory(park=park)
    image.compatible_accelerators.add(flavor.family.accelerator_model)
    PriceFactory(flavor=flavor, region=region, amount_minor=1000)
    pool = PoolFactory(
        backend=BackendFactory(park=park, config=backend_config or {}),
        region=region,
        accelerator_model=flavor.family.accelerator_model,
    )
    for n in range(nodes):
        register_node(pool=pool, hostname=f"n{n}", accelerators=per_node, vcpu=256, ram_gb=4096)
    QuotaLimit.objects.create(
        park=park, organization=organization, resource="accelerators", limit=accelerator_quota
    )
    request = HostRequest(
        flavor=flavor,
        image=image,
        region=region,
        system_disk_gb=flavor.system_disk_gb,
        ssh_public_key=SSH_KEY,
        name="host",
    )
    return World(organization=organization, owner=owner, request=request, pool=pool)
