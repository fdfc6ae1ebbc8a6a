"""The cloud disks page (/volumes/): created, grown, attached, detached and deleted through its
forms (HTMX answers the table again, 422 with the refusal); another organization's volume is a
404; the page in Chinese."""

import pytest

from apps.orders.models import InstanceState
from apps.storage.models import Volume, VolumeState
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    NodeFactory,
    OrganizationFactory,
    PoolFactory,
    RegionFactory,
    VolumeFactory,
)

ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}
HTMX = {"HTTP_HX_REQUEST": "true", **ENGLISH}


@pytest.fixture
def browser(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def server(park):
    region = RegionFactory(park=park, code="edge", name="Edge")
    backend = BackendFactory(park=park, name="agents", driver="agent")
    return NodeFactory(pool=PoolFactory(backend=backend, region=region))


def test_a_volume_goes_through_its_forms(browser, organization, server):
    created = browser.post(
        "/volumes/", {"name": "work", "size_gb": 20, "region": server.pool.region.pk}, **ENGLISH
    )
    assert created.status_code == 302, created.content.decode()
    volume = Volume.objects.get(name="work")
    host = InstanceFactory(
        organization=organization, node=server, pool=server.pool, state=InstanceState.RUNNING
    )
    attached = browser.post(
        f"/volumes/{volume.pk}/attach/", {"instance": host.pk, "mount_path": "/mnt/work"}, **HTMX
    )
    assert attached.status_code == 200
    assert "at its next start" in attached.content.decode()
    refused = browser.post(f"/volumes/{volume.pk}/detach/", **HTMX)
    assert refused.status_code == 422 and "Stop the host" in refused.content.decode()
    shrunk = browser.post(f"/volumes/{volume.pk}/grow/", {"size_gb": 5}, **HTMX)
    assert shrunk.status_code == 422 and "only grows" in shrunk.content.decode()
    grown = browser.post(f"/volumes/{volume.pk}/grow/", {"size_gb": 30}, **HTMX)
    assert "once its host is stopped" in grown.content.decode()
    Volume.objects.filter(pk=volume.pk).update(reported_size_gb=20)
    page = browser.get("/volumes/", **ENGLISH).content.decode()
    assert "20 GB on its server" in page and host.name in page
    type(host).objects.filter(pk=host.pk).update(state=InstanceState.STOPPED)
    assert browser.post(f"/volumes/{volume.pk}/detach/", **HTMX).status_code == 200
    snapshot = browser.post(f"/volumes/{volume.pk}/snapshot/", {"name": "copy"}, **HTMX)
    assert snapshot.status_code == 200 and Volume.objects.filter(source=volume).exists()
    assert browser.post(f"/volumes/{volume.pk}/delete/", **HTMX).status_code == 200
    assert Volume.objects.get(pk=volume.pk).state == VolumeState.DELETED


def test_another_organizations_volume_is_a_404(browser, park, server):
    theirs = VolumeFactory(organization=OrganizationFactory(park=park), node=server)
    for action in ("grow", "detach", "delete"):
        assert browser.post(f"/volumes/{theirs.pk}/{action}/", {"size_gb": 99}).status_code == 404


def test_the_page_in_chinese(browser, organization, server):
    VolumeFactory(organization=organization, node=server, name="work")
    page = browser.get("/volumes/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "云盘" in page and "work" in page
