"""Use cases of the organizations' shared file storage: creating an organization's file system in
a region (its database and role on the region's storage server, then its row), and reading what
each one stores, which its meter bills per GB."""

import contextlib
import math
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext as _
from psycopg import errors, sql

from apps.billing.metering import HOURS_PER_MONTH, MeterSpec, reconcile
from apps.billing.models import Meter, MeterKind
from apps.catalog.models import PriceKind, Region
from apps.catalog.selectors import price_in_force
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.sharedfs.models import SharedFileSystem
from apps.tenants.access import authorize
from apps.tenants.models import Organization
from apps.tenants.roles import Action
from apps.workloads.models import Workload, WorkloadKind

GIB = 1024**3
CONNECT_TIMEOUT_S = 10


def file_system_name(organization: Organization, region: Region) -> str:
    """The JuiceFS volume's name (lower case, digits and dashes), its role's and database's."""
    return f"{settings.LOAM_SHARED_FS_PREFIX}-o{organization.pk}-r{region.pk}"


def role_password(file_system: SharedFileSystem) -> str:
    """Derived from the portal's secret key: the same each time it is asked, so two requests
    that create the same file system at once can't leave it with a password nobody kept."""
    return salted_hmac("sharedfs.role", file_system.name).hexdigest()


def storage_url(file_system: SharedFileSystem) -> str:
    """The file system's database as its own role opens it (LOAM_SHARED_FS_SERVER's address)."""
    server = urlsplit(settings.LOAM_SHARED_FS_SERVER)
    address = server.hostname + (f":{server.port}" if server.port else "")
    credentials = f"{file_system.name}:{role_password(file_system)}"
    return urlunsplit(
        ("postgres", f"{credentials}@{address}", f"/{file_system.database}", server.query, "")
    )


def _create_database(file_system: SharedFileSystem) -> None:
    """Its role and its database, only its role may connect to; again is harmless."""
    role, database = sql.Identifier(file_system.name), sql.Identifier(file_system.database)
    password = sql.Literal(role_password(file_system))
    with psycopg.connect(
        settings.LOAM_SHARED_FS_SERVER, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    ) as connection:
        try:
            connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, password))
        except errors.DuplicateObject:
            connection.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, password))
        with contextlib.suppress(errors.DuplicateDatabase):
            connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(database, role))
        connection.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database))


def create_file_system(*, actor, organization: Organization, region: Region) -> SharedFileSystem:
    """The organization's file system in the region (the one it has, if it has one). Its hosts
    in the region mount it at /shared from their next start."""
    authorize(actor, organization, Action.ORDER)
    if region.park_id != organization.park_id:
        raise DomainError(_("No such region."), code="not_found", status=404)
    existing = SharedFileSystem.objects.filter(organization=organization, region=region).first()
    if existing is not None:
        return existing
    file_system = SharedFileSystem(
        organization=organization, region=region, name=file_system_name(organization, region)
    )
    # On the storage server first, outside any transaction: a row never names a database that
    # isn't there.
    try:
        _create_database(file_system)
    except psycopg.Error as error:
        raise DomainError(
            _("The region's file storage can't be reached; try again later."),
            code="storage_unavailable",
            status=503,
        ) from error
    try:
        with transaction.atomic(durable=True):
            file_system.workload = Workload.objects.create(
                organization=organization, kind=WorkloadKind.SHAREDFS
            )
            file_system.save()
            record_event(
                action="sharedfs.created",
                actor=actor,
                target=file_system,
                organization=organization,
                data={"region": region.code, "name": file_system.name},
            )
    except IntegrityError:  # created meanwhile by another request
        return SharedFileSystem.objects.get(organization=organization, region=region)
    return file_system


def stored_gb(used_bytes: int) -> int:
    """What is billed: every started GiB."""
    return math.ceil(used_bytes / GIB)


def _read_used_bytes(file_system: SharedFileSystem) -> int:
    """JuiceFS's own count of the bytes its files take (`juicefs info`/`df` report the same)."""
    with psycopg.connect(storage_url(file_system), connect_timeout=CONNECT_TIMEOUT_S) as db:
        try:
            row = db.execute("SELECT value FROM jfs_counter WHERE name = 'usedSpace'").fetchone()
        except errors.UndefinedTable:  # not formatted yet: no host has mounted it
            return 0
    return max(0, row[0]) if row else 0


def read_usage(file_system_id: int) -> None:
    """What the file system stores now, and its meter: GB stored at the region's price of a GB
    of cloud disk a month."""
    file_system = SharedFileSystem.objects.select_related("region__park").get(pk=file_system_id)
    used = _read_used_bytes(file_system)  # outside the transaction: another server's database
    now = timezone.now()
    price = price_in_force(region=file_system.region, kind=PriceKind.DISK_GB_MONTH)
    gb = stored_gb(used)
    specs = []
    if price is not None and gb:
        monthly = Decimal(price.amount_minor) * gb
        specs.append(MeterSpec(MeterKind.SHARED_FS, gb, monthly / HOURS_PER_MONTH))
    with transaction.atomic(durable=True):
        SharedFileSystem.objects.filter(pk=file_system.pk).update(
            used_bytes=used, usage_read_at=now
        )
        reconcile(
            Meter.objects.filter(workload_id=file_system.workload_id),
            specs=[spec for spec in specs if spec.hourly_minor > 0],
            new=dict(
                organization_id=file_system.organization_id, workload_id=file_system.workload_id
            ),
            currency=price.currency if price else file_system.region.park.currency,
            at=now,
        )
