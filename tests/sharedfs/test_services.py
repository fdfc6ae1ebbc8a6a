"""apps.sharedfs.services: an organization's file system made on the storage server once, as
its first host in the region starts; deleted with its database and role while no host mounts
it, its bill ending then; what it stores read and metered per GB."""

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import psycopg
import pytest
import time_machine
from django.utils import timezone, translation

from apps.billing import invoicing
from apps.billing.models import Meter, MeterKind
from apps.core.errors import PermissionDenied
from apps.core.models import AuditEvent
from apps.orders.models import InstanceState
from apps.sharedfs.models import SharedFileSystem, SharedFileSystemState
from apps.sharedfs.services import (
    FileSystemRefused,
    StorageUnavailable,
    delete_file_system,
    provide_file_system,
    read_usage,
    storage_url,
)
from apps.workloads.models import WorkloadKind
from tests.factories import (
    BackendFactory,
    InstanceFactory,
    MeterFactory,
    PoolFactory,
    PriceFactory,
    RegionFactory,
    SharedFileSystemFactory,
)
from tests.sharedfs.conftest import databases_of, roles_of

pytestmark = pytest.mark.django_db
GIB = 1024**3


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):  # messages are checked in English
        yield


@pytest.fixture
def region(park):
    return RegionFactory(park=park)


@pytest.fixture
def agent_host(organization, region):
    """agent_host(state) -> a host of the organization in the region, on an agent server."""
    pool = PoolFactory(
        backend=BackendFactory(park=organization.park, driver="agent"), region=region
    )

    def make(state=InstanceState.RUNNING, **fields):
        return InstanceFactory(
            organization=organization, region=region, pool=pool, state=state, **fields
        )

    return make


def test_a_file_system_is_a_database_of_its_own_made_once(storage_server, organization, region):
    file_system = provide_file_system(organization=organization, region=region, host_name="a1")

    assert file_system.name == f"{storage_server}-o{organization.pk}-r{region.pk}"
    assert file_system.workload.kind == WorkloadKind.SHAREDFS
    assert file_system.state == SharedFileSystemState.READY
    assert databases_of(storage_server) == [file_system.database]
    # Its own role opens it; the URL the agents get says so.
    with psycopg.connect(storage_url(file_system)) as connection:
        assert connection.execute("SELECT current_user").fetchone() == (file_system.name,)
    (created,) = AuditEvent.objects.filter(action="sharedfs.created")
    assert created.organization_id == organization.pk and created.data["host"] == "a1"

    again = provide_file_system(organization=organization, region=region, host_name="a2")
    assert again.pk == file_system.pk
    assert SharedFileSystem.objects.count() == 1
    assert AuditEvent.objects.filter(action="sharedfs.created").count() == 1


def test_an_unreachable_storage_server_makes_nothing(settings, organization, region):
    settings.LOAM_SHARED_FS_SERVER = "postgres://postgres@127.0.0.1:9/postgres?connect_timeout=2"

    with pytest.raises(StorageUnavailable):
        provide_file_system(organization=organization, region=region, host_name="a1")

    assert not SharedFileSystem.objects.exists()


def test_no_host_starts_with_one_being_deleted(organization, region):
    SharedFileSystemFactory(
        organization=organization, region=region, state=SharedFileSystemState.DELETING
    )

    with pytest.raises(StorageUnavailable) as refused:
        provide_file_system(organization=organization, region=region, host_name="a1")

    assert "being deleted" in refused.value.message


def _stores(file_system, used_bytes: int) -> None:
    """What a formatted JuiceFS volume keeps: its counters, written as its own role."""
    with psycopg.connect(storage_url(file_system), autocommit=True) as connection:
        connection.execute("CREATE TABLE jfs_counter (name varchar(255) PRIMARY KEY, value bigint)")
        connection.execute("INSERT INTO jfs_counter VALUES ('usedSpace', %s)", [used_bytes])


def test_usage_is_read_and_billed_per_started_gb_at_the_regions_disk_price(
    storage_server, organization, region
):
    PriceFactory(region=region, disk=True, amount_minor=72)  # ¥0.72 per GB a month
    file_system = provide_file_system(organization=organization, region=region, host_name="a1")

    read_usage(file_system.pk)  # no host has formatted it yet: nothing stored
    file_system.refresh_from_db()
    assert file_system.used_bytes == 0 and file_system.usage_read_at is not None
    assert not Meter.objects.filter(workload=file_system.workload).exists()

    _stores(file_system, 2 * GIB + 1)
    read_usage(file_system.pk)
    file_system.refresh_from_db()
    assert file_system.used_bytes == 2 * GIB + 1
    (meter,) = Meter.objects.filter(workload=file_system.workload, ended_at__isnull=True)
    assert meter.kind == MeterKind.SHARED_FS
    assert meter.quantity == 3
    assert meter.hourly_minor == Decimal(72 * 3) / 720
    assert meter.organization_id == organization.pk


def test_deleting_it_removes_its_database_and_role_and_ends_its_bill_to_the_second(
    storage_server, organization, region, owner, agent_host, django_capture_on_commit_callbacks
):
    PriceFactory(region=region, disk=True, amount_minor=72)
    file_system = provide_file_system(organization=organization, region=region, host_name="a1")
    _stores(file_system, GIB)
    read_usage(file_system.pk)
    agent_host(state=InstanceState.STOPPED)
    agent_host(state=InstanceState.RELEASED, released_at=timezone.now())
    deleted_at = timezone.now().replace(microsecond=0) + timedelta(hours=5, seconds=7)

    with (
        time_machine.travel(deleted_at, tick=False),
        django_capture_on_commit_callbacks(execute=True),
    ):
        deleting = delete_file_system(actor=owner, file_system=file_system)

    assert deleting.state == SharedFileSystemState.DELETING
    assert not SharedFileSystem.objects.exists()  # its job dropped it after commit
    assert databases_of(storage_server) == [] and roles_of(storage_server) == []
    (meter,) = Meter.objects.filter(workload=file_system.workload)  # kept: its bill
    assert meter.ended_at == deleted_at
    (event,) = AuditEvent.objects.filter(action="sharedfs.deleted")
    assert event.organization_id == organization.pk and event.data["name"] == file_system.name
    # The next host started in the region gets a new, empty one.
    again = provide_file_system(organization=organization, region=region, host_name="a2")
    assert again.pk != file_system.pk and databases_of(storage_server) == [again.database]


def test_it_is_not_deleted_while_a_host_mounts_it(organization, region, owner, agent_host):
    file_system = SharedFileSystemFactory(organization=organization, region=region)
    agent_host(name="a1")
    agent_host(name="a0", state=InstanceState.STARTING)
    # A host elsewhere, or on a server that mounts no shared storage, does not hold it.
    InstanceFactory(organization=organization, state=InstanceState.RUNNING)
    InstanceFactory(
        organization=organization,
        region=region,
        state=InstanceState.RUNNING,
        pool=PoolFactory(backend=BackendFactory(park=organization.park), region=region),
    )

    with pytest.raises(FileSystemRefused) as refused:
        delete_file_system(actor=owner, file_system=file_system)

    assert "a0, a1 mount this shared file storage" in refused.value.message
    assert SharedFileSystem.objects.get().state == SharedFileSystemState.READY


def test_only_who_may_release_deletes_it_and_only_once(organization, region, viewer, owner):
    file_system = SharedFileSystemFactory(organization=organization, region=region)
    with pytest.raises(PermissionDenied):
        delete_file_system(actor=viewer, file_system=file_system)
    SharedFileSystem.objects.filter(pk=file_system.pk).update(state=SharedFileSystemState.DELETING)
    with pytest.raises(FileSystemRefused):
        delete_file_system(actor=owner, file_system=file_system)


def test_one_being_deleted_is_not_read_or_billed_again(organization, region):
    file_system = SharedFileSystemFactory(
        organization=organization, region=region, state=SharedFileSystemState.DELETING
    )

    read_usage(file_system.pk)  # would reach its database, which has no role here

    assert SharedFileSystem.objects.get().usage_read_at is None
    assert not Meter.objects.filter(workload=file_system.workload).exists()


def test_a_month_of_shared_storage_is_a_line_of_its_invoice(organization):
    file_system = SharedFileSystemFactory(organization=organization)
    april = datetime(2026, 4, 1, tzinfo=ZoneInfo("Asia/Shanghai"))
    MeterFactory(
        organization=organization,
        instance=None,
        workload=file_system.workload,
        kind=MeterKind.SHARED_FS,
        quantity=3,
        hourly_minor=Decimal("0.3"),
        compute_units=0,
        started_at=april - timedelta(hours=10),
    )
    with time_machine.travel(april + timedelta(minutes=1), tick=False), translation.override("en"):
        (invoice,) = invoicing.issue_due_invoices(now=timezone.now())
    (line,) = invoice.lines.all()
    assert (line.description, line.kind, line.quantity) == (
        "Shared file storage",
        MeterKind.SHARED_FS,
        3,
    )
    assert line.amount_minor == 3  # 10 hours at 0.3 fen
