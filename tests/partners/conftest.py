"""A park with two partners and the park's own pool, each pool with a node of four cards, and a
tenant whose hosts and tasks run on them; `usage` adds an hour's charge of a host or task."""

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

import pytest
from django.utils import timezone, translation

from tests.factories import (
    AcceleratorFactory,
    InstanceFactory,
    NodeFactory,
    OrganizationFactory,
    PoolFactory,
    TaskFactory,
    UsageRecordFactory,
)
from tests.partners.factories import PartnerFactory, PartnerPoolFactory


@pytest.fixture(autouse=True)
def english(client):
    """Pages in English, and the services' messages too (whatever ran before in the process)."""
    client.cookies["django_language"] = "en"
    with translation.override("en"):
        yield


def last_month() -> date:
    """The month before this one (over, so its statement may be confirmed)."""
    return (timezone.localdate().replace(day=1) - timedelta(days=1)).replace(day=1)


def local(day: date, hour: int = 0, minute: int = 0) -> datetime:
    """A moment in the park's time zone, where months begin for metering."""
    return timezone.make_aware(
        datetime.combine(day, time(hour, minute)), timezone.get_default_timezone()
    )


@dataclass
class World:
    park: object
    tenant: object
    partner: object
    other_partner: object
    pool: object
    other_pool: object
    own_pool: object
    node: object
    other_node: object

    def host(self, pool, **kwargs):
        node = pool.nodes.first()
        return InstanceFactory(
            organization=self.tenant,
            flavor__family__accelerator_model=pool.accelerator_model,
            region=pool.region,
            pool=pool,
            node=node,
            running=True,
            ssh_public_key="ssh-ed25519 AAAATENANTSECRETKEY tenant@laptop",
            name="tenant-secret-host",
            **kwargs,
        )

    def usage(self, *, pool, at, amount_minor, task=False):
        """One record of `amount_minor` beginning `at`, of a host (or a task) on `pool`."""
        if task:
            subject = TaskFactory(organization=self.tenant, pool=pool, node=pool.nodes.first())
            return UsageRecordFactory(
                organization=self.tenant,
                for_task=True,
                task=subject,
                started_at=at,
                amount_minor=amount_minor,
            )
        return UsageRecordFactory(
            organization=self.tenant,
            instance=self.host(pool),
            started_at=at,
            amount_minor=amount_minor,
        )


def _pool_with_node(park, partner, name):
    pool = PoolFactory(backend__park=park, name=name)
    if partner is not None:
        PartnerPoolFactory(pool=pool, partner=partner)
    node = NodeFactory(pool=pool, hostname=f"{name}-node")
    for index in range(4):
        AcceleratorFactory(node=node, index=index)
    return pool, node


@pytest.fixture
def world(park):
    partner = PartnerFactory(organization=OrganizationFactory(park=park, name="Partner One"))
    other_partner = PartnerFactory(organization=OrganizationFactory(park=park, name="Partner Two"))
    pool, node = _pool_with_node(park, partner, "p1-pool")
    other_pool, other_node = _pool_with_node(park, other_partner, "p2-pool")
    own_pool, _ = _pool_with_node(park, None, "park-pool")
    tenant = OrganizationFactory(park=park, name="Tenant Secret Co")
    return World(park, tenant, partner, other_partner, pool, other_pool, own_pool, node, other_node)
