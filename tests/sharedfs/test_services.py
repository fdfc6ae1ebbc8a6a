"""apps.sharedfs.services: an organization's file system made on the storage server, once, by
those who may order; what it stores read and metered per GB."""

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import psycopg
import pytest
import time_machine
from django.utils import timezone, translation

from apps.billing import invoicing
from apps.billing.models import Meter, MeterKind
from apps.core.errors import DomainError, PermissionDenied
from apps.core.models import AuditEvent
from apps.sharedfs.models import SharedFileSystem
from apps.sharedfs.services import create_file_system, read_usage, storage_url
from apps.workloads.models import WorkloadKind
from tests.factories import MeterFactory, PriceFactory, RegionFactory, SharedFileSystemFactory
from tests.sharedfs.conftest import databases_of

pytestmark = pytest.mark.django_db
GIB = 1024**3


@pytest.fixture
def region(park):
    return RegionFactory(park=park)


def test_a_file_system_is_a_database_of_its_own_made_once(
    storage_server, organization, member, region
):
    file_system = create_file_system(actor=member, organization=organization, region=region)

    assert file_system.name == f"{storage_server}-o{organization.pk}-r{region.pk}"
    assert file_system.workload.kind == WorkloadKind.SHAREDFS
    assert databases_of(storage_server) == [file_system.database]
    # Its own role opens it; the URL the agents get says so.
    with psycopg.connect(storage_url(file_system)) as connection:
        assert connection.execute("SELECT current_user").fetchone() == (file_system.name,)
    assert AuditEvent.objects.filter(action="sharedfs.created", organization_id=organization.pk)

    again = create_file_system(actor=member, organization=organization, region=region)
    assert again.pk == file_system.pk
    assert SharedFileSystem.objects.count() == 1


def test_only_who_may_order_makes_one_and_only_in_its_park(
    storage_server, organization, viewer, member
):
    with pytest.raises(PermissionDenied):
        create_file_system(
            actor=viewer, organization=organization, region=RegionFactory(park=organization.park)
        )
    with pytest.raises(DomainError) as refused:
        create_file_system(actor=member, organization=organization, region=RegionFactory())
    assert refused.value.status == 404
    assert databases_of(storage_server) == []


def _stores(file_system, used_bytes: int) -> None:
    """What a formatted JuiceFS volume keeps: its counters, written as its own role."""
    with psycopg.connect(storage_url(file_system), autocommit=True) as connection:
        connection.execute("CREATE TABLE jfs_counter (name varchar(255) PRIMARY KEY, value bigint)")
        connection.execute("INSERT INTO jfs_counter VALUES ('usedSpace', %s)", [used_bytes])


def test_usage_is_read_and_billed_per_started_gb_at_the_regions_disk_price(
    storage_server, organization, member, region
):
    PriceFactory(region=region, disk=True, amount_minor=72)  # ¥0.72 per GB a month
    file_system = create_file_system(actor=member, organization=organization, region=region)

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
