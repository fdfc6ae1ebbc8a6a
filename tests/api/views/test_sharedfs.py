"""/api/v1/shared-file-systems/: the organization's shared file storage, read only."""

import pytest

from apps.quotas.models import QuotaResource
from tests.api.conftest import bearer, results
from tests.factories import QuotaLimitFactory, SharedFileSystemFactory

pytestmark = pytest.mark.django_db


def test_lists_the_organizations_file_systems_with_usage_and_quota(
    client, organization, other_organization, read_key
):
    mine = SharedFileSystemFactory(organization=organization, used_bytes=5 * 1024**3)
    theirs = SharedFileSystemFactory(organization=other_organization)
    QuotaLimitFactory(
        park=organization.park,
        organization=organization,
        resource=QuotaResource.SHARED_STORAGE_GB,
        limit=40,
    )

    (row,) = results(client.get("/api/v1/shared-file-systems/", **bearer(read_key)), count=1)

    assert row["id"] == mine.pk
    assert row["region"] == mine.region.code
    assert row["used_bytes"] == 5 * 1024**3
    assert row["capacity_gb"] == 40
    assert row["mount_path"] == "/shared"
    response = client.get(f"/api/v1/shared-file-systems/{theirs.pk}/", **bearer(read_key))
    assert response.status_code == 404
