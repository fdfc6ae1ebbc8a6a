"""Saved images (保存镜像): a tenant saves a stopped agent host's root file system as a private
image of its organization, and orders new hosts from it.

The portal asks the host's agent for the save in the host's spec (`save_image`, a stopped host
only: docs/agent-protocol.md); the agent copies the merged root into an image of its own
(agent/loam_agent/hosts/saved_images.py says why a full copy) and reports it back with its
digest and size. From then on the server reports the image among those it holds, so the
catalog offers it (to its organization only) on the pools of that server's region: a host of
it placed on another server there waits while the image is copied to that server
(`agents.image_copies`); placement prefers the servers that hold it.

Its storage is billed per GB-month at the region's cloud disk price, metered per second like
everything else (a meter of its workload, open from ready to deleted), and it counts in the
organization's `storage_gb` quota (`saved_image_quota_usage`). Deleting it is refused while a
host that is not released uses it; once deleted, the agents of the servers holding it remove
its files (the hosts list's `saved_images` no longer names it).
"""

import secrets
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.agents import image_copies
from apps.agents.models import (
    SAVED_IMAGE_TRANSITIONS,
    AgentHost,
    AgentServer,
    SavedImage,
    SavedImageState,
    WantedState,
    billed_gb,
)
from apps.agents.services import bump_hosts_version
from apps.billing.metering import HOURS_PER_MONTH, MeterSpec, reconcile
from apps.billing.models import Meter, MeterKind
from apps.catalog.models import Image, PriceKind
from apps.catalog.selectors import price_in_force
from apps.core import sql
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.transactions import lock, lock_all, locked
from apps.core.transitions import transition
from apps.orders.models import Instance, InstanceState
from apps.quotas.services import QuotaExceeded, Usage, quota_holder, reserve
from apps.tenants.access import authorize
from apps.tenants.roles import Action
from apps.workloads.models import Workload, WorkloadKind

CODE_PREFIX = "saved-"
# Kept in English in the row (the agent's report that causes them has no reader's language)
# and translated where shown; an agent's own message is shown as it sent it.
HOST_CHANGED = gettext_noop("The host was changed before its image was saved.")
AGENT_TOO_OLD = gettext_noop("The server's agent is too old to save images; upgrade it.")
NAME_MAX = 120


def _visible_instance(organization, instance_id) -> Instance:
    instance = Instance.objects.filter(organization=organization, pk=instance_id).first()
    if instance is None:
        raise DomainError(_("No such host."), code="not_found", status=404)
    return instance


@transaction.atomic(durable=True)
def save_host_image(*, organization, actor, instance_id: int, name: str, description: str = ""):
    """Ask the stopped host's agent to save its root as the organization's image `name`."""
    authorize(actor, organization, Action.ORDER)
    instance = _visible_instance(organization, instance_id)
    name, description = name.strip(), description.strip()
    if not name or len(name) > NAME_MAX:
        raise DomainError(
            _("Name the image (at most %(count)d characters).") % {"count": NAME_MAX},
            code="invalid_name",
        )
    if Image.objects.filter(organization=organization, name=name, saved__state__in=_KEPT).exists():
        raise DomainError(
            _("Your organization already has an image named %(name)s.") % {"name": name},
            code="duplicate_name",
            status=409,
        )
    instance = locked(Instance, instance.pk, related=["image"])
    if instance.state != InstanceState.STOPPED:
        raise DomainError(
            _("Only a stopped host can be saved as an image; stop %(host)s first.")
            % {"host": instance.name},
            code="host_not_stopped",
            status=409,
        )
    # Its size is known once saved: until then it holds its host's system disk, the most its
    # root can be. The organization's lock comes after its host's (LOCK_ORDER).
    try:
        reserve(organization=organization, demand=Usage(storage_gb=instance.system_disk_gb))
    except QuotaExceeded as refusal:
        raise QuotaExceeded(
            _(
                "Saving %(host)s needs up to %(size)d GB of storage (its system disk) until "
                "its image's size is known: %(reason)s"
            )
            % {"host": instance.name, "size": instance.system_disk_gb, "reason": refusal.message}
        ) from None
    host = AgentHost.objects.filter(handle=instance.backend_handle).first()
    if not instance.backend_handle or host is None:
        raise DomainError(
            _("Only hosts on the host agent's servers can be saved as images."),
            code="not_supported",
            status=422,
        )
    lock(AgentServer, host.server_id)  # the server before its host, as the agent's reports do
    host = locked(AgentHost, host.pk)
    if host.state != WantedState.STOPPED or host.save_image:
        raise DomainError(
            _("%(host)s is being changed or saved already; try again when it is done.")
            % {"host": instance.name},
            code="host_busy",
            status=409,
        )
    base = instance.image
    image = Image.objects.create(
        park_id=organization.park_id,
        organization=organization,
        code=f"{CODE_PREFIX}{secrets.token_hex(6)}",
        name=name,
        description=description,
        os=base.os,
        software_stack=base.software_stack,
        stack_version=base.stack_version,
    )
    image.compatible_accelerators.set(base.compatible_accelerators.all())
    host.save_image = image.code
    host.generation += 1
    host.save(update_fields=["save_image", "generation", "updated_at"])
    bump_hosts_version(host.server)
    saved = SavedImage.objects.create(
        image=image,
        organization=organization,
        workload=Workload.objects.create(organization=organization, kind=WorkloadKind.IMAGE),
        server=host.server,
        instance=instance,
        host=host,
        generation=host.generation,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    record_event(
        actor=actor,
        action="saved_image.requested",
        target=saved,
        organization=organization,
        data={"image": image.code, "name": name, "instance": instance.pk},
    )
    return saved


_KEPT = (SavedImageState.SAVING, SavedImageState.READY)


def record_saves(*, server: AgentServer, reports: dict[str, dict], now=None) -> None:
    """The saves the agent's reports ({host handle: report}) finish or give up: called from
    `services.record_host_reports`, in its transaction, with the server and hosts locked."""
    now = now or timezone.now()
    saving = SavedImage.objects.filter(
        server=server, state=SavedImageState.SAVING, host__handle__in=list(reports)
    ).select_related("host", "image")
    for saved in saving:
        report = reports[saved.host.handle]
        result = report.get("saved_image") or {}
        if report["generation"] < saved.generation:
            continue
        if result.get("name") == saved.image.code:
            _ready(saved, server=server, digest=result["digest"], size_bytes=result["size_bytes"])
        elif report["state"] == "failed" and report["generation"] == saved.generation:
            _failed(saved, report.get("message") or "")
        elif report["generation"] > saved.generation or report["state"] != "stopped":
            _failed(saved, HOST_CHANGED)
        else:  # stopped at that generation with nothing saved: the agent can't save images
            _failed(saved, AGENT_TOO_OLD)


def _ready(saved: SavedImage, *, server: AgentServer, digest: str, size_bytes: int) -> None:
    saved = transition(
        saved,
        SavedImageState.READY,
        table=SAVED_IMAGE_TRANSITIONS,
        changes={"digest": digest, "size_bytes": size_bytes},
        audit_data={"size_bytes": size_bytes},
    )
    AgentHost.objects.filter(pk=saved.host_id, save_image=saved.image.code).update(save_image="")
    # Held from now on, not from the server's next heartbeat.
    if saved.image.code not in server.image_names:
        server.images = [*server.images, {"name": saved.image.code, "digest": digest}]
        server.save(update_fields=["images"])
    _follow_meter(saved, billed=True, at=saved.updated_at)


def _failed(saved: SavedImage, message: str) -> None:
    saved = transition(
        saved,
        SavedImageState.FAILED,
        table=SAVED_IMAGE_TRANSITIONS,
        changes={"message": message[:2000]},
    )
    AgentHost.objects.filter(pk=saved.host_id, save_image=saved.image.code).update(save_image="")
    Image.objects.filter(pk=saved.image_id).update(is_active=False)
    bump_hosts_version(saved.server)  # no longer kept: whatever the agent saved of it goes


def _follow_meter(saved: SavedImage, *, billed: bool, at) -> None:
    """Its storage, at the region's cloud disk price per GB-month, while it is kept."""
    specs, currency = [], ""
    if billed:
        region = saved.server.node.pool.region
        price = price_in_force(region=region, kind=PriceKind.DISK_GB_MONTH)
        if price is not None and price.amount_minor:
            monthly = Decimal(price.amount_minor) * saved.size_gb
            specs = [MeterSpec(MeterKind.IMAGE, saved.size_gb, monthly / HOURS_PER_MONTH)]
            currency = price.currency
    reconcile(
        Meter.objects.filter(workload_id=saved.workload_id),
        specs=specs,
        new=dict(organization_id=saved.organization_id, workload_id=saved.workload_id),
        currency=currency,
        at=at,
    )


_KEPT_SAVED_SQL = """
SELECT saved.state, saved.size_bytes, host.system_disk_gb
FROM agents_savedimage saved
LEFT JOIN orders_instance host ON host.id = saved.instance_id
WHERE saved.organization_id IN ({organizations}) AND saved.state IN (%s, %s)
"""


def _kept_saved_query(organizations) -> tuple[str, list]:
    members, params = sql.members(organizations)
    return (
        _KEPT_SAVED_SQL.format(organizations=members),
        [*params, *(state.value for state in _KEPT)],
    )


@quota_holder(SavedImage, _kept_saved_query)
def saved_image_quota_usage(rows) -> Usage:
    """QUOTA_HOLDERS: the GB of the images `organizations` keep (storage_gb, as cloud
    disks): each ready one its size as billed, each being saved its host's system disk.
    Copies of one to other servers of its region are the portal's to make and count once.
    Written out: counted on every order, where the ORM took several times the statement's
    CPU to build it. `saved_image_quota_usage(organizations)`: ids, rows or a queryset."""
    total = 0
    for state, size_bytes, system_disk_gb in rows:
        if state == SavedImageState.READY:
            total += billed_gb(size_bytes)
        elif system_disk_gb is not None:
            total += system_disk_gb
    return Usage(storage_gb=total)


def hosts_using(saved: SavedImage):
    """The organization's hosts ordered from the image that are not released."""
    return Instance.objects.filter(image_id=saved.image_id).exclude(state=InstanceState.RELEASED)


@transaction.atomic(durable=True)
def delete_saved_image(*, organization, actor, saved_image_id: int) -> SavedImage:
    """Delete the image, unless a host uses it (the refusal names them).

    Checked under the lock of its catalog image, which an order of it takes too
    (`orders.services.submit_create`): a host ordered meanwhile is either counted here, or its
    order, coming second, finds the image deleted and is refused."""
    authorize(actor, organization, Action.RELEASE)
    found = (
        SavedImage.objects.filter(organization=organization, pk=saved_image_id)
        .exclude(state=SavedImageState.DELETED)
        .values_list("image_id", flat=True)
        .first()
    )
    if found is not None:
        lock(Image, found)
    saved = (
        SavedImage.objects.filter(organization=organization, pk=saved_image_id)
        .exclude(state=SavedImageState.DELETED)
        .select_related("image", "server__node__pool")
        .first()
    )
    if saved is None:
        raise DomainError(_("No such image."), code="not_found", status=404)
    if saved.state == SavedImageState.SAVING:
        raise DomainError(
            _("%(image)s is still being saved; delete it when it is ready.")
            % {"image": saved.image.name},
            code="image_saving",
            status=409,
        )
    users = list(hosts_using(saved).values_list("name", flat=True)[:5])
    if users:
        raise DomainError(
            _("%(image)s is in use by %(hosts)s; release those hosts first.")
            % {"image": saved.image.name, "hosts": ", ".join(users)},
            code="image_in_use",
            status=409,
        )
    # In LOCK_ORDER: its meter, the servers that hold it, then its own row.
    _follow_meter(saved, billed=False, at=timezone.now())
    holders = sorted({saved.server_id, *image_copies.forget_copies(saved)})
    lock_all(AgentServer, holders)
    saved = transition(saved, SavedImageState.DELETED, table=SAVED_IMAGE_TRANSITIONS, actor=actor)
    Image.objects.filter(pk=saved.image_id).update(is_active=False)
    for server in AgentServer.objects.filter(pk__in=holders).order_by("pk"):
        server.images = [image for image in server.images if image["name"] != saved.image.code]
        server.save(update_fields=["images"])
        bump_hosts_version(server)  # its agent removes the files (the hosts list's saved_images)
    return saved
