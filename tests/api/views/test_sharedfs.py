"""/api/v1/shared-file-systems/: the organization's shared file storage, read and deleted."""

import pytest

from apps.orders.models import InstanceState
from apps.quotas.models import QuotaResource
from apps.sharedfs.models import SharedFileSystem, SharedFileSystemState
from tests.api.conftest import bearer, results
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    PoolFactory,
    QuotaLimitFactory,
    SharedFileSystemFactory,
)

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
    assert row["state"] == "ready"
    response = client.get(f"/api/v1/shared-file-systems/{theirs.pk}/", **bearer(read_key))
    assert response.status_code == 404


def test_delete_is_a_409_naming_the_hosts_that_mount_it_then_a_204(
    api, client, organization, other_organization, read_key, django_capture_on_commit_callbacks
):
    file_system = SharedFileSystemFactory(organization=organization)
    backend = BackendFactory(park=organization.park, driver="agent")
    host = InstanceFactory(
        organization=organization,
        region=file_system.region,
        pool=PoolFactory(backend=backend, region=file_system.region),
        state=InstanceState.RUNNING,
        name="trainer-1",
    )
    path = f"/api/v1/shared-file-systems/{file_system.pk}/"

    refused = api.delete(path)
    assert refused.status_code == 409
    assert "trainer-1 mount this shared file storage" in refused.json()["detail"]
    assert client.delete(path, **bearer(read_key)).status_code == 403

    InstanceFactory._meta.model.objects.filter(pk=host.pk).update(state=InstanceState.STOPPED)
    with django_capture_on_commit_callbacks():  # its drop is the services' tests'
        assert api.delete(path).status_code == 204
    assert SharedFileSystem.objects.get().state == SharedFileSystemState.DELETING
    theirs = SharedFileSystemFactory(organization=other_organization)
    assert api.delete(f"/api/v1/shared-file-systems/{theirs.pk}/").status_code == 404
