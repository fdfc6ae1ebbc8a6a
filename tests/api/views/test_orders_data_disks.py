"""A host's data disk through the API: `release` takes `keep_data_disk`, `data-disk` sets what
a release that says nothing does (the park's auto-release), the volume list shows whose data
disk a volume is; refusals as problem+json."""

import pytest

from apps.orders.models import InstanceState
from apps.storage.models import Volume, VolumeState
from tests.api.conftest import assert_problem, results
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host
from tests.orders.conftest import english_messages as english_messages

pytestmark = pytest.mark.usefixtures("english_messages")


def test_the_data_disk_is_listed_kept_by_choice_and_released_with_it(
    api, agent, order_host, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    (listed,) = results(api.get("/api/v1/volumes/"))
    assert (listed["data_disk_of"], listed["instance"], listed["mount_path"]) == (
        host.pk, host.pk, "/data"
    )  # fmt: skip
    assert listed["keep_on_release"] is False
    path = f"/api/v1/instances/{host.pk}/"
    assert_problem(api.post(f"{path}data-disk/", {}), 400)
    kept = api.post(f"{path}data-disk/", {"keep_on_release": True})
    assert kept.status_code == 200, kept.content
    assert kept.json()["keep_on_release"] is True
    assert_problem(
        api.post(f"/api/v1/volumes/{listed['id']}/grow/", {"size_gb": 40}), 409, "volume_refused"
    )
    assert_problem(api.post(f"{path}release/", {"keep_data_disk": "maybe"}), 400)

    with django_capture_on_commit_callbacks(execute=True):
        released = api.post(f"{path}release/", {})  # says nothing: the choice made stands
    assert released.status_code == 202, released.content
    host.refresh_from_db()
    assert host.state == InstanceState.RELEASED
    volume = Volume.objects.get(pk=listed["id"])
    assert volume.state != VolumeState.DELETED and volume.workload is None
    (after,) = results(api.get("/api/v1/volumes/"))
    assert (after["data_disk_of"], after["instance"]) == (None, None)
    assert_problem(api.post(f"{path}data-disk/", {"keep_on_release": False}), 409)


def test_release_deletes_the_data_disk_by_default_and_refuses_keeping_none(
    api, agent, order_host, django_capture_on_commit_callbacks
):
    without = order_host(name="bare")
    assert_problem(
        api.post(f"/api/v1/instances/{without.pk}/release/", {"keep_data_disk": True}),
        409,
        "volume_refused",
    )
    assert_problem(api.post(f"/api/v1/instances/{without.pk}/data-disk/",
                            {"keep_on_release": True}), 409, "volume_refused")  # fmt: skip
    host = order_host(data_disk_gb=30)
    with django_capture_on_commit_callbacks(execute=True):
        released = api.post(f"/api/v1/instances/{host.pk}/release/", {"keep_data_disk": False})
    assert released.status_code == 202, released.content
    assert Volume.objects.get(name="web-data").state == VolumeState.DELETED
    assert results(api.get("/api/v1/volumes/")) == []
