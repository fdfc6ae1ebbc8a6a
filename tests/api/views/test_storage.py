"""`/api/v1/volumes/`: create, grow, snapshot, attach, detach, delete; refusals as problem+json;
another organization's volume or host is a 404."""

import pytest

from apps.orders.models import InstanceState
from apps.storage.models import Volume, VolumeState
from tests.api.conftest import assert_problem, results
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    NodeFactory,
    OrganizationFactory,
    PoolFactory,
    RegionFactory,
    VolumeFactory,
)


@pytest.fixture
def server(park):
    """An agent server in region `edge` of the park."""
    region = RegionFactory(park=park, code="edge")
    backend = BackendFactory(park=park, name="agents", driver="agent")
    return NodeFactory(pool=PoolFactory(backend=backend, region=region))


def test_a_volume_is_created_grown_snapshotted_attached_detached_and_deleted(
    api, organization, server
):
    created = api.post("/api/v1/volumes/", {"name": "work", "size_gb": 20, "region": "edge"})
    assert created.status_code == 201, created.content
    volume = created.json()
    assert (volume["server"], volume["state"], volume["instance"]) == (
        server.hostname, "creating", None
    )  # fmt: skip
    path = f"/api/v1/volumes/{volume['id']}/"
    assert_problem(api.post(f"{path}grow/", {"size_gb": 10}), 409, "volume_refused")
    assert api.post(f"{path}grow/", {"size_gb": 30}).json()["size_gb"] == 30
    copy = api.post(f"{path}snapshot/", {"name": "copy"})
    assert copy.status_code == 201 and copy.json()["source"] == volume["public_id"]

    host = InstanceFactory(
        organization=organization, node=server, pool=server.pool, state=InstanceState.RUNNING
    )
    attached = api.post(f"{path}attach/", {"instance": host.pk, "mount_path": "/mnt/work"})
    assert attached.status_code == 200, attached.content
    assert attached.json()["at_next_start"] is True
    assert attached.json()["instance"] == host.pk
    assert_problem(api.post(f"{path}detach/"), 409, "volume_refused")  # the host runs
    assert_problem(api.delete(path), 409, "volume_refused")  # attached
    type(host).objects.filter(pk=host.pk).update(state=InstanceState.STOPPED)
    assert api.post(f"{path}detach/").json()["instance"] is None
    assert api.delete(path).status_code == 204
    assert Volume.objects.get(pk=volume["id"]).state == VolumeState.DELETED
    assert [row["name"] for row in results(api.get("/api/v1/volumes/"))] == ["copy"]


def test_bad_input_is_a_clear_error(api, organization, server, park):
    assert_problem(api.post("/api/v1/volumes/", {"name": "x", "size_gb": 0, "region": "edge"}), 400)
    far_region = RegionFactory(park=park, code="far")
    far_host = InstanceFactory(
        organization=organization,
        region=far_region,
        node=NodeFactory(pool=PoolFactory(backend=server.pool.backend, region=far_region)),
        state=InstanceState.STOPPED,
    )
    volume = VolumeFactory(organization=organization, node=server)
    refused = api.post(
        f"/api/v1/volumes/{volume.pk}/attach/", {"instance": far_host.pk, "mount_path": "/mnt/x"}
    )
    assert "own region" in assert_problem(refused, 409, "volume_refused")["detail"]
    near_host = InstanceFactory(organization=organization, node=server, state="stopped")
    refused = api.post(
        f"/api/v1/volumes/{volume.pk}/attach/", {"instance": near_host.pk, "mount_path": "/etc"}
    )
    assert "system folder" in assert_problem(refused, 400)["detail"]


def test_another_organizations_volume_or_host_is_a_404(api, organization, server, park):
    theirs = VolumeFactory(organization=OrganizationFactory(park=park), node=server)
    assert api.get(f"/api/v1/volumes/{theirs.pk}/").status_code == 404
    assert api.post(f"/api/v1/volumes/{theirs.pk}/grow/", {"size_gb": 99}).status_code == 404
    ours = VolumeFactory(organization=organization, node=server)
    their_host = InstanceFactory(organization=theirs.organization, node=server, state="stopped")
    answer = api.post(
        f"/api/v1/volumes/{ours.pk}/attach/", {"instance": their_host.pk, "mount_path": "/mnt/x"}
    )
    assert answer.status_code == 404
