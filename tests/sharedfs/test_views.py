"""文件存储: the organization's page (its file systems per region, made by who may order) and the
operators' page of the park's file systems."""

import pytest
from django.urls import reverse

from apps.sharedfs.models import SharedFileSystem
from tests.factories import RegionFactory, SharedFileSystemFactory

pytestmark = [pytest.mark.django_db]


def test_the_page_shows_usage_per_region_and_makes_one_where_there_is_none(
    client, storage_server, organization, member
):
    stored = SharedFileSystemFactory(organization=organization, used_bytes=3 * 1024**3)
    empty = RegionFactory(park=organization.park, name="Edge-2")
    client.force_login(member)

    page = client.get(reverse("sharedfs:overview"), HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert page.status_code == 200
    body = page.content.decode()
    assert "文件存储" in body
    assert f'id="region-{stored.region.pk}"' in body and "3.00" in body

    made = client.post(reverse("sharedfs:overview"), {"region": empty.pk})
    assert made.status_code == 302
    assert SharedFileSystem.objects.filter(organization=organization, region=empty).exists()


def test_a_viewer_makes_none_and_a_region_of_another_park_is_refused(
    client, organization, viewer, member
):
    client.force_login(viewer)
    region = RegionFactory(park=organization.park)
    assert client.post(reverse("sharedfs:overview"), {"region": region.pk}).status_code == 404
    client.force_login(member)
    refused = client.post(reverse("sharedfs:overview"), {"region": RegionFactory().pk})
    assert refused.status_code == 422
    assert not SharedFileSystem.objects.exists()


def test_operators_see_each_organizations_usage(client, park, operator, organization):
    file_system = SharedFileSystemFactory(organization=organization, used_bytes=1024**3)
    other_park = SharedFileSystemFactory()
    client.force_login(operator)

    body = client.get(reverse("sharedfs:park_overview", args=[park.pk])).content.decode()

    assert f'id="file-system-{file_system.pk}"' in body and organization.name in body
    assert f'id="file-system-{other_park.pk}"' not in body
    other = reverse("sharedfs:park_overview", args=[other_park.organization.park_id])
    assert client.get(other).status_code == 404
