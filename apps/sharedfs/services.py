"""Use cases of the organizations' shared file storage: an organization's file system in a region
made as its first host there starts (its database and role on the region's storage server, then
its row), deleted by the tenant while no host mounts it (its meter ends, then its database and
role go), and what each one stores read, which its meter bills per GB."""

import contextlib
import math
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

import psycopg
from django.conf import settings
from django.db import transaction
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
from apps.core.extensions import ExtensionPoint
from apps.core.transactions import lock, locked, on_commit_task
from apps.core.transitions import transition
from apps.sharedfs.models import (
    SHARED_FILE_SYSTEM_TRANSITIONS,
    SharedFileSystem,
    SharedFileSystemState,
)
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
    """Its role and its database, only its role may connect to; again is harmless, and so is
    another start making them at the same moment."""
    role, database = sql.Identifier(file_system.name), sql.Identifier(file_system.database)
    password = sql.Literal(role_password(file_system))
    with _storage_server() as connection:
        try:
            connection.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, password))
        except (errors.DuplicateObject, errors.UniqueViolation):
            connection.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, password))
        with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
            connection.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(database, role))
        connection.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database))


def _drop_database(file_system: SharedFileSystem) -> None:
    """Its database (its files' metadata and data blocks) and its role; again is harmless."""
    role, database = sql.Identifier(file_system.name), sql.Identifier(file_system.database)
    with _storage_server() as connection:
        # FORCE: a server that still had it mounted a moment ago may hold a connection.
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(database))
        connection.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))


def _storage_server() -> psycopg.Connection:
    return psycopg.connect(
        settings.LOAM_SHARED_FS_SERVER, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    )


class StorageUnavailable(DomainError):
    code = "storage_unavailable"
    status = 503

    def __init__(self, message: str = ""):
        super().__init__(
            message or _("The region's file storage can't be reached; try again later.")
        )


class FileSystemRefused(DomainError):
    code = "shared_fs_refused"
    status = 409


# Who says which hosts have an organization's file system in a region mounted now: the orders
# app, plugged in at its ready() (its hosts are on a floor above this app).
MOUNTING_HOSTS = ExtensionPoint("the hosts that mount a shared file system")


def offered() -> bool:
    """Whether this portal has a storage server for shared file storage (LOAM_SHARED_FS_SERVER
    set): without one, no host mounts any."""
    return bool(settings.LOAM_SHARED_FS_SERVER)


def provide_file_system(
    *, organization: Organization, region: Region, host_name: str
) -> SharedFileSystem:
    """The organization's file system in the region, made as its first host there (`host_name`)
    starts, before the host's server is asked to run it: the host's spec then mounts it at
    /shared, formatted by the first server that mounts it. Every start asks; all but the first
    find it. Called by the provisioning jobs, never under a row lock: the storage server is
    called first, outside any transaction (a row never names a database that isn't there), and
    the row is made under the organization's lock, so two first hosts make one."""
    existing = _current(organization, region)
    if existing is not None:
        return _ready(existing)
    file_system = SharedFileSystem(
        organization=organization, region=region, name=file_system_name(organization, region)
    )
    try:
        _create_database(file_system)
    except psycopg.Error as error:
        raise StorageUnavailable() from error
    with transaction.atomic(durable=True):
        lock(Organization, organization.pk)
        existing = _current(organization, region)
        if existing is not None:  # made meanwhile by another host's start
            return _ready(existing)
        file_system.workload = Workload.objects.create(
            organization=organization, kind=WorkloadKind.SHAREDFS
        )
        file_system.save()
        record_event(
            action="sharedfs.created",
            target=file_system,
            organization=organization,
            data={"region": region.code, "name": file_system.name, "host": host_name},
        )
    return file_system


def _current(organization: Organization, region: Region) -> SharedFileSystem | None:
    return SharedFileSystem.objects.filter(organization=organization, region=region).first()


def _ready(file_system: SharedFileSystem) -> SharedFileSystem:
    if file_system.state != SharedFileSystemState.READY:
        # A host can't start while its organization deletes it: it starts once it is gone,
        # with a new, empty one.
        raise StorageUnavailable(
            _("The shared file storage of %(region)s is being deleted; try again in a minute.")
            % {"region": file_system.region.name}
        )
    return file_system


@transaction.atomic(durable=True)
def delete_file_system(*, actor, file_system: SharedFileSystem) -> SharedFileSystem:
    """Delete the file system with its files: refused while a host mounts it (they would lose
    /shared under their feet); its meter ends now, and its database and role go after commit
    (`drop_file_system`). The organization's next host start in the region makes a new one."""
    from apps.sharedfs.tasks import drop_file_system

    organization = file_system.organization
    authorize(actor, organization, Action.RELEASE)
    # The organization first: a host's order or start takes it too, so none starts meanwhile.
    lock(Organization, organization.pk)
    file_system = SharedFileSystem.objects.filter(pk=file_system.pk).first()
    if file_system is None or file_system.state != SharedFileSystemState.READY:
        raise FileSystemRefused(_("This shared file storage is already being deleted."))
    file_system = locked(SharedFileSystem, file_system.pk, related=("region__park",))
    hosts = MOUNTING_HOSTS.one()(file_system.organization_id, file_system.region_id)
    if hosts:
        raise FileSystemRefused(
            _("%(hosts)s mount this shared file storage: stop or release them first.")
            % {"hosts": ", ".join(hosts)}
        )
    file_system = transition(
        file_system,
        SharedFileSystemState.DELETING,
        table=SHARED_FILE_SYSTEM_TRANSITIONS,
        actor=actor,
        held=True,
        action="sharedfs.deleted",
        audit_data={"region": file_system.region.code, "name": file_system.name},
    )
    _bill(file_system, used_bytes=file_system.used_bytes, at=timezone.now())
    on_commit_task(drop_file_system, file_system.pk)
    return file_system


def finish_deleting(file_system_id: int) -> None:
    """Its database and role dropped on the storage server, then its row (its workload and
    meters stay: its bill). Again, or for one already gone, is harmless."""
    file_system = SharedFileSystem.objects.filter(
        pk=file_system_id, state=SharedFileSystemState.DELETING
    ).first()
    if file_system is None:
        return
    try:
        _drop_database(file_system)
    except psycopg.Error as error:
        raise StorageUnavailable() from error
    with transaction.atomic(durable=True):
        lock(Organization, file_system.organization_id)
        SharedFileSystem.objects.filter(pk=file_system.pk).delete()


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
    of cloud disk a month. One being deleted is left alone (its meter ended)."""
    file_system = SharedFileSystem.objects.get(pk=file_system_id)
    if file_system.state != SharedFileSystemState.READY:
        return
    used = _read_used_bytes(file_system)  # outside the transaction: another server's database
    now = timezone.now()
    with transaction.atomic(durable=True):
        file_system = (
            SharedFileSystem.objects.select_for_update(no_key=True, of=("self",))
            .select_related("region__park")
            .filter(pk=file_system_id, state=SharedFileSystemState.READY)
            .first()
        )
        if file_system is None:  # deleted meanwhile: its meter ended with it
            return
        SharedFileSystem.objects.filter(pk=file_system.pk).update(
            used_bytes=used, usage_read_at=now
        )
        _bill(file_system, used_bytes=used, at=now)


def _bill(file_system: SharedFileSystem, *, used_bytes: int, at) -> None:
    """Its meter as it is now: its started GB stored while it is ready, none once deleted."""
    price = price_in_force(region=file_system.region, kind=PriceKind.DISK_GB_MONTH)
    gb = stored_gb(used_bytes)
    specs = []
    ready = file_system.state == SharedFileSystemState.READY
    if ready and price is not None and price.amount_minor and gb:
        monthly = Decimal(price.amount_minor) * gb
        specs.append(MeterSpec(MeterKind.SHARED_FS, gb, monthly / HOURS_PER_MONTH))
    reconcile(
        Meter.objects.filter(workload_id=file_system.workload_id),
        specs=specs,
        new=dict(organization_id=file_system.organization_id, workload_id=file_system.workload_id),
        currency=price.currency if price else file_system.region.park.currency,
        at=at,
    )
