"""Every list page of the console runs as many queries with 200 rows as with 5: rows come
with what they show (joins, prefetches, annotations), never a query each."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.orchestration.models import Accelerator, Allocation
from apps.orchestration.services import keep_card_readings
from apps.orders.models import OrderState
from apps.tenants.models import VerificationState
from tests.factories import (
    AcceleratorFactory,
    AllocationFactory,
    AuditEventFactory,
    BackendFactory,
    FlavorFactory,
    ImageFactory,
    InstanceFactory,
    MembershipFactory,
    NodeFactory,
    OrderFactory,
    OrganizationFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
)

pytestmark = pytest.mark.django_db

FEW, MANY = 5, 200


class Rows:
    """Makes the rows of one page's list in the given park (`add(n)` adds n more)."""

    def __init__(self, park):
        self.park = park
        self.organization = OrganizationFactory(park=park)
        self.region = RegionFactory(park=park)
        self.pool = PoolFactory(backend__park=park, region=self.region)
        self.node = NodeFactory(pool=self.pool)

    # one method per page; each adds `n` rows of what the page lists
    def verifications(self, n):
        OrganizationFactory.create_batch(
            n, park=self.park, verification_state=VerificationState.SUBMITTED
        )

    def organizations(self, n):
        for organization in OrganizationFactory.create_batch(n, park=self.park):
            MembershipFactory(organization=organization, role="owner")
            InstanceFactory(organization=organization, running=True)

    def orders(self, n):
        for _ in range(n):
            instance = InstanceFactory(organization=self.organization, region=self.region)
            OrderFactory(
                organization=self.organization,
                instance=instance,
                state=OrderState.AWAITING_APPROVAL,
            )

    def instances(self, n):
        for _ in range(n):
            AllocationFactory(node=NodeFactory(pool=self.pool))

    def audit(self, n):
        AuditEventFactory.create_batch(n, organization=self.organization)

    def flavors(self, n):
        for _ in range(n):
            FlavorFactory(family__park=self.park)

    def images(self, n):
        for _ in range(n):
            image = ImageFactory(park=self.park)
            image.compatible_accelerators.add(self.pool.accelerator_model)

    def prices(self, n):
        for _ in range(n):
            PriceFactory(region=self.region, effective_from=timezone.now() - timedelta(days=1))

    def backends(self, n):
        for backend in BackendFactory.create_batch(n, park=self.park):
            PoolFactory(backend=backend, region=self.region)

    def pools(self, n):
        for _ in range(n):
            NodeFactory(pool=PoolFactory(backend=self.pool.backend, region=self.region))

    def nodes(self, n):
        for _ in range(n):
            AcceleratorFactory(node=NodeFactory(pool=self.pool))

    def idle(self, n):
        """Running instances whose one accelerator has read idle for hours."""
        now = timezone.now()
        for _ in range(n):
            allocation = AllocationFactory(node=NodeFactory(pool=self.pool))
            Allocation.objects.filter(pk=allocation.pk).update(created_at=now - timedelta(hours=6))
            node = allocation.node
            Accelerator.objects.create(node=node, index=0, allocation=allocation)
            node.telemetry = {
                "updated_at": now.isoformat(),
                "accelerators": {
                    "0": {"util": 0.5, "idle_since": (now - timedelta(hours=5)).isoformat()}
                },
            }
            node.save(update_fields=["telemetry"])
            keep_card_readings([node])  # as probing the backend keeps them

    def quota_history(self, n):
        AuditEventFactory.create_batch(
            n,
            organization=self.organization,
            action="quota.changed",
            data={"resource": "vcpu", "from": 1, "to": 2},
        )

    def organization_instances(self, n):
        InstanceFactory.create_batch(n, organization=self.organization, running=True)

    def overview(self, n):
        for _ in range(n):
            AcceleratorFactory(node=NodeFactory(pool=PoolFactory(backend=self.pool.backend)))


PAGES = [
    ("verifications", "/ops/verifications/", "verifications"),
    ("organizations", "/ops/organizations/", "organizations"),
    ("orders", "/ops/orders/", "orders"),
    ("orders-all", "/ops/orders/?state=", "orders"),
    ("instances", "/ops/instances/", "instances"),
    ("audit", "/ops/audit/", "audit"),
    ("flavors", "/ops/parks/{park}/catalog/", "flavors"),
    ("images", "/ops/parks/{park}/catalog/images/", "images"),
    ("prices-current", "/ops/parks/{park}/catalog/prices/", "prices"),
    ("prices-all", "/ops/parks/{park}/catalog/prices/?when=", "prices"),
    ("backends", "/ops/parks/{park}/backends/", "backends"),
    ("pools", "/ops/parks/{park}/pools/", "pools"),
    ("nodes", "/ops/parks/{park}/nodes/", "nodes"),
    # Each pool is a choice of the node filter, named with its region.
    ("nodes-of-many-pools", "/ops/parks/{park}/nodes/", "pools"),
    ("idle", "/ops/parks/{park}/idle/", "idle"),
    ("quotas", "/ops/organizations/{organization}/quotas/", "quota_history"),
    ("organization", "/ops/organizations/{organization}/", "organization_instances"),
    ("overview", "/ops/", "overview"),
]


@pytest.mark.parametrize(("name", "path", "maker"), PAGES, ids=[p[0] for p in PAGES])
def test_list_pages_query_count_does_not_grow_with_rows(
    client, park, operator, django_assert_num_queries, name, path, maker
):
    rows = Rows(park)
    add = getattr(rows, maker)
    url = path.format(park=park.pk, organization=rows.organization.pk)
    client.force_login(operator)
    add(FEW)
    assert client.get(url).status_code == 200  # warm: sessions, content types
    with CaptureQueriesContext(connection) as few:
        response = client.get(url)
    assert response.status_code == 200
    shown = len(response.content)

    add(MANY - FEW)
    with django_assert_num_queries(len(few.captured_queries)):
        response = client.get(url)
    assert response.status_code == 200
    assert len(response.content) > shown + 1000, "the new rows are on the page"
