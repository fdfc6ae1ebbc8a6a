"""文件存储: the organization's page (its file systems per region, the hosts that mount each,
its deletion by who may release) and the operators' page of the park's file systems."""

import pytest
from django.urls import reverse

from apps.orders.models import InstanceState
from apps.sharedfs.models import SharedFileSystem, SharedFileSystemState
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    PoolFactory,
    RegionFactory,
    SharedFileSystemFactory,
)

pytestmark = [pytest.mark.django_db]


def agent_host(file_system, **fields):
    backend = BackendFactory(park=file_system.organization.park, driver="agent")
    return InstanceFactory(
        organization=file_system.organization,
        region=file_system.region,
        pool=PoolFactory(backend=backend, region=file_system.region),
        **fields,
    )


def test_the_page_shows_usage_and_the_hosts_that_mount_it_per_region(client, organization, member):
    stored = SharedFileSystemFactory(organization=organization, used_bytes=3 * 1024**3)
    agent_host(stored, name="trainer-1", state=InstanceState.RUNNING)
    agent_host(stored, name="parked", state=InstanceState.STOPPED)
    RegionFactory(park=organization.park, name="Edge-2")
    client.force_login(member)

    page = client.get(reverse("sharedfs:overview"), HTTP_ACCEPT_LANGUAGE="zh-hans")

    assert page.status_code == 200
    body = page.content.decode()
    assert "文件存储" in body and "首台主机" in body  # none yet in Edge-2: its first host makes it
    assert f'id="region-{stored.region.pk}"' in body and "3.00" in body
    assert "trainer-1" in body and "parked" not in body
    assert reverse("sharedfs:delete", args=[stored.pk]) in body


def test_deleting_is_refused_with_the_hosts_that_mount_it(client, organization, member):
    file_system = SharedFileSystemFactory(organization=organization)
    agent_host(file_system, name="trainer-1", state=InstanceState.RUNNING)
    client.force_login(member)

    answer = client.post(
        reverse("sharedfs:delete", args=[file_system.pk]),
        HTTP_ACCEPT_LANGUAGE="en",
        follow=True,
    )

    assert "trainer-1 mount this shared file storage: stop or release them first" in (
        answer.content.decode()
    )
    assert SharedFileSystem.objects.get().state == SharedFileSystemState.READY


def test_deleting_one_no_host_mounts_says_billing_stopped(
    client, organization, member, django_capture_on_commit_callbacks
):
    file_system = SharedFileSystemFactory(organization=organization)
    agent_host(file_system, name="parked", state=InstanceState.STOPPED)
    client.force_login(member)

    with django_capture_on_commit_callbacks() as dropping:  # not run: no storage server here
        answer = client.post(
            reverse("sharedfs:delete", args=[file_system.pk]),
            HTTP_ACCEPT_LANGUAGE="zh-hans",
            follow=True,
        )

    assert "正在删除" in answer.content.decode()
    assert SharedFileSystem.objects.get().state == SharedFileSystemState.DELETING
    assert len(dropping) == 1


def test_a_viewer_deletes_nothing_nor_another_organizations(client, organization, viewer, member):
    ours = SharedFileSystemFactory(organization=organization)
    theirs = SharedFileSystemFactory()
    client.force_login(viewer)
    assert client.post(reverse("sharedfs:delete", args=[ours.pk])).status_code == 403
    page = client.get(reverse("sharedfs:overview")).content.decode()
    assert reverse("sharedfs:delete", args=[ours.pk]) not in page
    client.force_login(member)
    assert client.post(reverse("sharedfs:delete", args=[theirs.pk])).status_code == 404
    assert SharedFileSystem.objects.filter(state=SharedFileSystemState.READY).count() == 2


def test_operators_see_each_organizations_usage(client, park, operator, organization):
    file_system = SharedFileSystemFactory(organization=organization, used_bytes=1024**3)
    other_park = SharedFileSystemFactory()
    client.force_login(operator)

    body = client.get(reverse("sharedfs:park_overview", args=[park.pk])).content.decode()

    assert f'id="file-system-{file_system.pk}"' in body and organization.name in body
    assert f'id="file-system-{other_park.pk}"' not in body
    other = reverse("sharedfs:park_overview", args=[other_park.organization.park_id])
    assert client.get(other).status_code == 404
