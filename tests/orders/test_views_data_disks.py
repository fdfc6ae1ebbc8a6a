"""A host's data disk on the host's page and on /volumes/: shown as the data disk of its host,
kept or deleted on release as chosen (the release form asks, the confirmation says so), and in
Chinese."""

import pytest

from apps.orders.models import InstanceState
from apps.storage.models import Volume, VolumeState
from tests.orders.agent_hosts import agent as agent  # the fixtures, shared
from tests.orders.agent_hosts import agent_world as agent_world
from tests.orders.agent_hosts import converging as converging
from tests.orders.agent_hosts import fake_agent as fake_agent
from tests.orders.agent_hosts import order_host as order_host

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


@pytest.fixture
def signed_in(client, owner):
    client.force_login(owner)
    return client


def test_the_host_page_shows_its_data_disk_and_the_release_asks_what_becomes_of_it(
    signed_in, agent, order_host, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    disk = Volume.objects.get(data_disk_of=host.workload)
    page = signed_in.get(f"/instances/{host.pk}/", **ENGLISH).content.decode()
    assert f"At /data: cloud disk web-data ({disk.public_id})" in page
    assert "Deleted when the host is released." in page
    assert "Its data disk is deleted with it unless you chose to keep it" in page
    assert '<option value="false" selected>Delete its data disk</option>' in page
    listing = signed_in.get("/volumes/", **ENGLISH).content.decode()
    assert "data disk of web" in listing and "deleted when the host is released" in listing
    assert f"/volumes/{disk.pk}/grow/" not in listing  # it grows with its host

    chosen = signed_in.post(f"/instances/{host.pk}/data-disk/", {"keep_on_release": "true"})
    assert chosen.status_code == 302
    page = signed_in.get(f"/instances/{host.pk}/", **ENGLISH).content.decode()
    assert "Kept as a cloud disk when the host is released." in page
    assert '<option value="true" selected>Keep its data disk as a cloud disk</option>' in page
    assert signed_in.post(f"/instances/{host.pk}/data-disk/", {}).status_code == 302
    assert Volume.objects.get(pk=disk.pk).keep_on_release  # a bad post changed nothing

    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(f"/instances/{host.pk}/actions/release/", {"keep_data_disk": "false"})
    host.refresh_from_db()
    assert host.state == InstanceState.RELEASED
    assert Volume.objects.get(pk=disk.pk).state == VolumeState.DELETED  # the release's choice


def test_a_data_disk_kept_through_the_release_form_is_a_cloud_disk_of_its_own(
    signed_in, agent, order_host, django_capture_on_commit_callbacks
):
    host = order_host(data_disk_gb=30)
    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(f"/instances/{host.pk}/actions/release/", {"keep_data_disk": "true"})
    disk = Volume.objects.get(name="web-data")
    assert (disk.state, disk.workload, disk.data_disk_of) == (VolumeState.CREATING, None, None)
    listing = signed_in.get("/volumes/", **ENGLISH).content.decode()
    assert "data disk of" not in listing and f"/volumes/{disk.pk}/grow/" in listing


def test_the_data_disk_in_chinese(signed_in, agent, order_host):
    host = order_host(data_disk_gb=30)
    page = signed_in.get(f"/instances/{host.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "保留其数据盘为云盘" in page and "释放时删除" in page
    listing = signed_in.get("/volumes/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "web 的数据盘" in listing
