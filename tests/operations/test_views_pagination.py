"""The console's long lists come a page at a time: page 2 shows the rest, in the same order, and
a page number that is not one (or past the end) shows page 1 or the last page, never an error."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.operations.views._common import PAGE_SIZE
from apps.operations.views.infrastructure import IDLE_PER_PAGE
from apps.orchestration.models import Accelerator, Allocation, Node
from apps.orchestration.services import keep_card_readings
from apps.orders.models import Instance
from tests.factories import (
    AllocationFactory,
    InstanceFactory,
    NodeFactory,
    OrganizationFactory,
    PoolFactory,
)

pytestmark = pytest.mark.django_db

EXTRA = 7  # rows past the first page


def idle_hosts(park, n):
    """`n` running hosts whose one card has read idle for hours, on nodes of one pool."""
    pool = PoolFactory(backend__park=park)
    now = timezone.now()
    for minutes in range(n):
        node = NodeFactory(pool=pool)
        allocation = AllocationFactory(node=node)
        Allocation.objects.filter(pk=allocation.pk).update(created_at=now - timedelta(hours=9))
        Accelerator.objects.create(node=node, index=0, allocation=allocation)
        since = now - timedelta(hours=5, minutes=minutes)  # each a minute longer idle
        node.telemetry = {
            "updated_at": now.isoformat(),
            "accelerators": {"0": {"util": 0.5, "idle_since": since.isoformat()}},
        }
        node.save(update_fields=["telemetry"])
        keep_card_readings([node])  # as probing the backend keeps them


def hosts(park, n):
    organization = OrganizationFactory(park=park)
    InstanceFactory.create_batch(n, organization=organization, running=True)


def nodes(park, n):
    NodeFactory.create_batch(n, pool=PoolFactory(backend__park=park))


def names(response):
    return [_name(getattr(row, "instance", row)) for row in response.context["page"]]


def _name(row):
    return row.hostname if isinstance(row, Node) else row.name


LISTS = [
    ("/ops/instances/", hosts, PAGE_SIZE),
    ("/ops/parks/{park}/idle/", idle_hosts, IDLE_PER_PAGE),
    ("/ops/parks/{park}/nodes/", nodes, PAGE_SIZE),
]


@pytest.mark.parametrize(("path", "make", "per_page"), LISTS, ids=["instances", "idle", "nodes"])
def test_page_two_shows_the_rest_and_a_bad_page_number_is_no_error(
    client, park, operator, path, make, per_page
):
    make(park, per_page + EXTRA)
    url = path.format(park=park.pk)
    client.force_login(operator)

    first, second = client.get(url), client.get(url + "?page=2")
    assert first.status_code == second.status_code == 200
    assert len(names(first)) == per_page and len(names(second)) == EXTRA
    assert not set(names(first)) & set(names(second))
    assert len(set(names(first)) | set(names(second))) == per_page + EXTRA
    assert "Page 2 of 2" in second.content.decode()

    for bad, same_as in (("x", first), ("0", second), ("-1", second), ("99", second), ("", first)):
        response = client.get(f"{url}?page={bad}")
        assert response.status_code == 200, bad
        assert names(response) == names(same_as), bad


def test_the_idle_page_lists_the_longest_idle_first_across_pages(client, park, operator):
    idle_hosts(park, IDLE_PER_PAGE + EXTRA)
    client.force_login(operator)
    url = f"/ops/parks/{park.pk}/idle/"
    rows = [*client.get(url).context["page"], *client.get(url + "?page=2").context["page"]]
    since = [row.idle_since for row in rows]
    assert since == sorted(since) and len(set(since)) == len(since)
    assert {row.instance.pk for row in rows} == set(
        Instance.objects.filter(organization__park=park).values_list("pk", flat=True)
    )


FILTERED = [
    # (list, its filter in the query string, whether a row named so is one the filter keeps)
    ("/ops/instances/", "q=keep", lambda name: name.startswith("keep")),
    ("/ops/parks/{park}/nodes/", "q=keep", lambda name: name.startswith("keep")),
]


@pytest.mark.parametrize(("path", "query", "kept"), FILTERED, ids=["instances", "nodes"])
def test_a_filtered_list_keeps_its_filter_on_page_two(client, park, operator, path, query, kept):
    organization = OrganizationFactory(park=park)
    pool = PoolFactory(backend__park=park)
    for prefix in ("keep", "drop"):
        for n in range(PAGE_SIZE + EXTRA):
            InstanceFactory(organization=organization, running=True, name=f"{prefix}-{n}")
            NodeFactory(pool=pool, hostname=f"{prefix}-node-{n}")
    url = path.format(park=park.pk)
    client.force_login(operator)

    first = client.get(f"{url}?{query}")
    assert f'href="?{query}&page=2"' in first.content.decode()
    second = client.get(f"{url}?{query}&page=2")
    rows = names(first) + names(second)
    assert len(names(second)) == EXTRA
    assert len(set(rows)) == PAGE_SIZE + EXTRA and all(kept(name) for name in rows)
