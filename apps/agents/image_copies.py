"""Saved images copied on demand to the other servers of their region (保存镜像, issue 34).

A saved image is made on the server of the host it was saved from. A host ordered from it may
run on any server of that region: placement prefers the servers that hold it and falls back on
the others (`nodes_awaiting_image`, orchestration's NODES_AWAITING_IMAGE). A host placed on a
server without it asks for a copy there (`ask_for_copy`, from the driver's provision) and waits
in provisioning, out of its server's hosts list, until the copy is ready; then it is listed and
starts. The host's and the image's pages say "copying to server X, n %" meanwhile.

The copy goes through the portal, in two halves, over the agent API both agents already call:

1. The holder's hosts list names the image under `image_transfers` with "send": its agent packs
   it (a tar of its rootfs and facts, owners kept as numbers) and PUTs the archive to
   /api/v1/agent/saved-images/<code>/archive with the archive's sha256; the portal keeps it in
   LOAM_IMAGE_ARCHIVE_DIR, checking the length and the sha256 as the bytes arrive.
2. The target's hosts list then names it with "receive", the URL and that sha256: its agent
   GETs it, checks the sha256, unpacks it among its saved images and reports it (POST
   …/copied); the copy is ready, and the server holds the image.

Through the portal rather than agent to agent: an agent only ever calls the portal (nothing
listens on a server, and the servers of a region need not reach each other), the credential it
has is the only authority needed, and the portal counts the bytes as they pass, which is the
progress the tenant sees. The archive is removed once no copy waits for it. A copy that fails
fails the hosts waiting for it with the reason; the next host that needs it asks again.
"""

import hashlib
import os
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from apps.agents.models import (
    SAVED_IMAGE_COPY_TRANSITIONS,
    AgentServer,
    SavedImage,
    SavedImageCopy,
    SavedImageCopyState,
    SavedImageState,
)
from apps.core.audit import record_event
from apps.core.errors import DomainError
from apps.core.sql import fetch_all
from apps.core.transactions import lock, lock_all
from apps.core.transitions import transition

CHUNK = 1 << 20
# How often the bytes that went through are written down for the progress shown.
PROGRESS_EVERY = 16 << 20
WAITING = (SavedImageCopyState.SENDING, SavedImageCopyState.RECEIVING)
SHA256_DIGITS = 64
DIGEST_MISMATCH = gettext_noop(
    "The image's archive arrived damaged (its sha256 differs from what its server sent)."
)


def archive_path(code: str) -> Path:
    return Path(settings.LOAM_IMAGE_ARCHIVE_DIR) / f"{code}.tar"


def _ready_saved(code: str) -> SavedImage | None:
    return (
        SavedImage.objects.filter(image__code=code, state=SavedImageState.READY)
        .select_related("image", "server__node__pool")
        .first()
    )


# --- placement -------------------------------------------------------------------------------


def _ready_saved_region(code: str) -> int | None:
    """The region of `_ready_saved(code)`'s server, or None where none is ready. Written out:
    every order of an image asks (twice, through both placement providers), and nearly every
    image is not a saved one, so the answer is usually nothing, which the ORM took several
    times this statement's cost to build (bench/order_profile.py)."""
    rows = fetch_all(
        SavedImage,
        """
SELECT pool.region_id
FROM agents_savedimage saved
JOIN catalog_image image ON image.id = saved.image_id
JOIN agents_agentserver server ON server.id = saved.server_id
JOIN orchestration_node node ON node.id = server.node_id
JOIN orchestration_pool pool ON pool.id = node.pool_id
WHERE image.code = %s AND saved.state = %s
ORDER BY saved.id
LIMIT 1
""",
        [code, SavedImageState.READY],
    )
    return rows[0][0] if rows else None


def nodes_awaiting_image(pool_ids, image_code: str) -> set[int]:
    """The nodes of these (agent) pools whose servers lack the saved image `image_code` but can
    start it once it is copied to them (they are in its region): what orchestration's
    NODES_AWAITING_IMAGE answers (`selectors.nodes_awaiting_image`)."""
    region_id = _ready_saved_region(image_code)
    if region_id is None:
        return set()
    servers = AgentServer.objects.filter(
        node__pool_id__in=pool_ids, node__pool__region_id=region_id, revoked_at__isnull=True
    ).only("node_id", "images", "images_reported_at")
    return {server.node_id for server in servers if image_code not in server.image_names}


def copyable_codes(region_ids) -> set[str]:
    """The codes of the saved images ready in these regions: any server there can start them."""
    return set(
        SavedImage.objects.filter(
            state=SavedImageState.READY, server__node__pool__region_id__in=region_ids
        ).values_list("image__code", flat=True)
    )


# --- asked for by a host ---------------------------------------------------------------------


def ask_for_copy(*, server: AgentServer, image_code: str) -> SavedImageCopy | None:
    """A host of `image_code` is placed on `server` (locked by the caller): the copy it waits
    for, asked for now where the server lacks the saved image; None where it needs none."""
    saved = _ready_saved(image_code)
    if saved is None or saved.server_id == server.pk or image_code in server.image_names:
        return None
    copy, created = SavedImageCopy.objects.get_or_create(saved_image=saved, server=server)
    if created:
        record_event(
            actor=None,
            action="saved_image_copy.requested",
            target=copy,
            organization=saved.organization,
            data={"image": image_code, "server": server.public_id},
        )
    elif copy.state == SavedImageCopyState.FAILED:
        copy = transition(
            copy,
            SavedImageCopyState.SENDING,
            table=SAVED_IMAGE_COPY_TRANSITIONS,
            changes={"sent_bytes": 0, "received_bytes": 0, "message": "", "moved_at": None},
        )
    return copy


def awaited_copy(server_id: int, image_code: str) -> SavedImageCopy | None:
    """The copy a host of `image_code` on this server waits for (not ready yet), if any."""
    return (
        SavedImageCopy.objects.filter(
            server_id=server_id,
            saved_image__image__code=image_code,
            saved_image__state=SavedImageState.READY,
        )
        .exclude(state=SavedImageCopyState.READY)
        .select_related("saved_image__image", "server__node")
        .first()
    )


def awaited_codes(server: AgentServer) -> set[str]:
    """The saved images hosts on this server wait for: those hosts are not listed yet."""
    return set(
        SavedImageCopy.objects.filter(server=server, saved_image__state=SavedImageState.READY)
        .exclude(state=SavedImageCopyState.READY)
        .values_list("saved_image__image__code", flat=True)
    )


# --- the hosts list ----------------------------------------------------------------------------


def _involving(server: AgentServer):
    return SavedImageCopy.objects.filter(Q(server=server) | Q(saved_image__server=server))


def copies_tag(server: AgentServer) -> str:
    """Part of the hosts list's ETag: changes whenever a copy to or from the server moves."""
    states = _involving(server).order_by("pk").values_list("pk", "state", "saved_image__state")
    return hashlib.sha256(repr(list(states)).encode()).hexdigest()[:12]


def image_transfers(server: AgentServer) -> list[dict]:
    """The hosts list's `image_transfers`: the saved images its agent sends to the portal (it
    holds them and another server waits), and those it fetches (their archive is here)."""
    transfers = {}
    copies = (
        _involving(server)
        .filter(state__in=WAITING, saved_image__state=SavedImageState.READY)
        .select_related("saved_image__image")
        .order_by("pk")
    )
    for copy in copies:
        code = copy.saved_image.image.code
        url = f"/api/v1/agent/saved-images/{code}/archive"
        if copy.server_id == server.pk and copy.state == SavedImageCopyState.RECEIVING:
            transfers[(code, "receive")] = {
                "name": code,
                "direction": "receive",
                "url": url,
                "sha256": copy.archive_sha256,
                "size_bytes": copy.archive_bytes,
            }
        elif copy.server_id != server.pk and copy.state == SavedImageCopyState.SENDING:
            transfers[(code, "send")] = {"name": code, "direction": "send", "url": url}
    return list(transfers.values())


def kept_copies(server: AgentServer) -> set[str]:
    """The saved images copied (or being copied) to the server that it is to keep."""
    return set(
        SavedImageCopy.objects.filter(
            server=server,
            state__in=(SavedImageCopyState.RECEIVING, SavedImageCopyState.READY),
            saved_image__state=SavedImageState.READY,
        ).values_list("saved_image__image__code", flat=True)
    )


# --- the holder sends ------------------------------------------------------------------------


def _refused(message: str, code: str, status: int = 409) -> DomainError:
    return DomainError(message, code=code, status=status)


def _sending(server: AgentServer, code: str):
    saved = _ready_saved(code)
    if saved is None or saved.server_id != server.pk:
        raise _refused(_("This server holds no saved image %(code)s.") % {"code": code}, "unknown")
    copies = SavedImageCopy.objects.filter(saved_image=saved, state=SavedImageCopyState.SENDING)
    if not copies.exists():
        raise _refused(
            _("No server waits for a copy of %(code)s now.") % {"code": code}, "unwanted"
        )
    return saved, copies


def receive_archive(*, server: AgentServer, code: str, body, length: int, sha256: str) -> None:
    """The archive of saved image `code`, sent by the server that holds it (`body`: a stream of
    `length` bytes whose sha256 is `sha256`): kept for the copies that wait for it."""
    saved, copies = _sending(server, code)
    if len(sha256) != SHA256_DIGITS or not length:
        raise _refused(
            _("Send the archive's length and its sha256 (64 hex digits)."), "invalid", 400
        )
    target = archive_path(code)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    hasher, done, noted = hashlib.sha256(), 0, 0
    try:
        with open(partial, "wb") as file:
            while chunk := body.read(min(CHUNK, length - done)):
                file.write(chunk)
                hasher.update(chunk)
                done += len(chunk)
                if done - noted >= PROGRESS_EVERY:
                    copies.update(sent_bytes=done, moved_at=timezone.now())
                    noted = done
                if done >= length:
                    break
        if done != length or hasher.hexdigest() != sha256.lower():
            raise _refused(
                _("The archive arrived incomplete or damaged: send it again."), "damaged", 400
            )
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    _archived(saved, sha256=sha256.lower(), size=length)


@transaction.atomic(durable=True)
def _archived(saved: SavedImage, *, sha256: str, size: int) -> None:
    waiting = SavedImageCopy.objects.filter(
        saved_image=saved, state=SavedImageCopyState.SENDING
    ).order_by("pk")
    lock_all(SavedImageCopy, waiting.values_list("pk", flat=True))
    for copy in waiting:
        transition(
            copy,
            SavedImageCopyState.RECEIVING,
            table=SAVED_IMAGE_COPY_TRANSITIONS,
            held=True,
            changes={
                "archive_sha256": sha256,
                "archive_bytes": size,
                "sent_bytes": size,
                "moved_at": timezone.now(),
            },
        )
    _drop_archive_unless_awaited(saved)  # none waits any more: the image was deleted meanwhile


# --- the target fetches ----------------------------------------------------------------------


def archive_to_fetch(*, server: AgentServer, code: str) -> tuple[SavedImageCopy, Path]:
    """The copy to `server` that waits for the archive of `code`, and the archive's file."""
    copy = (
        SavedImageCopy.objects.filter(
            server=server,
            saved_image__image__code=code,
            saved_image__state=SavedImageState.READY,
            state=SavedImageCopyState.RECEIVING,
        )
        .select_related("saved_image__image")
        .first()
    )
    if copy is None:
        raise _refused(_("No copy of %(code)s waits for this server.") % {"code": code}, "unwanted")
    path = archive_path(code)
    if not path.is_file():
        raise _refused(_("The archive of %(code)s is gone.") % {"code": code}, "gone", 410)
    return copy, path


def stream_archive(copy: SavedImageCopy, path: Path):
    """The archive's bytes, noting how many went out as they do."""
    copies = SavedImageCopy.objects.filter(pk=copy.pk)
    done, noted = 0, 0
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            yield chunk
            done += len(chunk)
            if done - noted >= PROGRESS_EVERY:
                copies.update(received_bytes=done, moved_at=timezone.now())
                noted = done
    copies.update(received_bytes=done, moved_at=timezone.now())


@transaction.atomic(durable=True)
def record_copied(*, server: AgentServer, code: str, sha256: str = "", error: str = "") -> None:
    """The agent's word on a transfer of `code`: the target unpacked the archive whose sha256
    is `sha256`, or either end gave up (`error`)."""
    saved = SavedImage.objects.filter(image__code=code).select_related("image").first()
    if saved is None:
        raise _refused(_("No saved image %(code)s.") % {"code": code}, "unknown", 404)
    lock(AgentServer, server.pk)
    if saved.server_id == server.pk:  # the holder could not send it
        failing = SavedImageCopy.objects.filter(
            saved_image=saved, state=SavedImageCopyState.SENDING
        )
    else:
        failing = SavedImageCopy.objects.filter(saved_image=saved, server=server).exclude(
            state__in=(SavedImageCopyState.READY, SavedImageCopyState.FAILED)
        )
    copies = list(failing.order_by("pk"))
    lock_all(SavedImageCopy, [copy.pk for copy in copies])
    if not error and saved.server_id != server.pk:
        copy = next(iter(copies), None)
        if copy is None:
            return  # reported again: ready already
        if copy.state != SavedImageCopyState.RECEIVING or sha256.lower() != copy.archive_sha256:
            error = DIGEST_MISMATCH
        else:
            transition(
                copy, SavedImageCopyState.READY, table=SAVED_IMAGE_COPY_TRANSITIONS, held=True
            )
            if code not in server.image_names:
                server.images = [*server.images, {"name": code, "digest": saved.digest}]
                server.save(update_fields=["images"])
            _drop_archive_unless_awaited(saved)
            return
    for copy in copies:
        transition(
            copy,
            SavedImageCopyState.FAILED,
            table=SAVED_IMAGE_COPY_TRANSITIONS,
            held=True,
            changes={"message": (error or DIGEST_MISMATCH)[:2000]},
        )
    _drop_archive_unless_awaited(saved)


def _drop_archive_unless_awaited(saved: SavedImage) -> None:
    awaited = SavedImageCopy.objects.filter(
        saved_image=saved, state=SavedImageCopyState.RECEIVING
    ).exists()
    if not awaited:
        transaction.on_commit(lambda: archive_path(saved.image.code).unlink(missing_ok=True))


def forget_copies(saved: SavedImage) -> list[int]:
    """The image is deleted (its rows locked by the caller): the servers it was copied to,
    which drop it from what they hold; its archive goes."""
    servers = list(
        SavedImageCopy.objects.filter(saved_image=saved)
        .order_by("server_id")
        .values_list("server_id", flat=True)
    )
    transaction.on_commit(lambda: archive_path(saved.image.code).unlink(missing_ok=True))
    return servers
