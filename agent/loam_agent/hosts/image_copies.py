"""Saved images copied to this server from another of its region, through the portal (the
portal's apps/agents/image_copies.py says when and why through it).

The portal's hosts list names under `image_transfers` what to do:

- {"name", "direction": "send", "url"}: this server holds the saved image and another waits
  for it: pack it (`pack`: a tar of its folder, owners as numbers, extended attributes kept)
  and PUT it to `url` with its sha256;
- {"name", "direction": "receive", "url", "sha256"}: GET the archive from `url`, check its
  sha256, unpack it among the saved images (`unpack`) and say so to the portal.

Each transfer runs in a thread of its own (`ImageCopier`), one per image and direction at a
time: a poll that lists it again meanwhile starts nothing. One the portal can't be reached for
is tried again at a later poll while it is listed; one that can't succeed (a damaged archive,
an image that isn't here) is reported failed, with why, and the portal fails the hosts that
wait for it.

Work files sit beside the saved images, on their file system, where they are never taken for
one (no facts file at their top): .outgoing/<name>.tar (packed, removed once sent), and
.incoming/<name>.tar with .incoming/<name>/ (fetched and unpacked, renamed to <name> whole).
GNU tar extracts as root without following the archive's own symlinks out of the folder
(it makes those last), and the archive is checked against the sha256 its sender gave first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import threading
from pathlib import Path

from loam_agent.client import PortalClient, PortalError
from loam_agent.hosts.image import BuiltImage
from loam_agent.hosts.model import HostError
from loam_agent.hosts.saved_images import check_name, saved_image
from loam_agent.hosts.workers import Workers

logger = logging.getLogger(__name__)

OUTGOING = ".outgoing"
INCOMING = ".incoming"
# Owners as numbers (the image's own, from 0) and every extended attribute (file
# capabilities: ping's cap_net_raw), as the saved image has them.
TAR_OPTIONS = ("--numeric-owner", "--xattrs", "--xattrs-include=*")


def _work_dir(saved: Path, which: str) -> Path:
    folder = saved / which
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    return folder


def _tar(*arguments: str) -> None:
    result = subprocess.run(["tar", *TAR_OPTIONS, *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"copying a saved image: tar: {result.stderr.strip()[-2000:]}")


def sha256_of(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def pack(saved: Path, name: str) -> tuple[Path, str]:
    """The saved image `name` as one archive (its facts and rootfs): its path and sha256."""
    check_name(name)
    if saved_image(saved, name) is None:
        raise HostError(f"saved image {name!r} isn't on this server")
    outgoing = _work_dir(saved, OUTGOING)
    archive = outgoing / f"{name}.tar"
    partial = outgoing / f"{name}.tar.partial"
    try:
        _tar("--create", "--file", str(partial), "-C", str(saved / name), "image.json", "rootfs")
        partial.rename(archive)
    finally:
        partial.unlink(missing_ok=True)
    return archive, sha256_of(archive)


def unpack(saved: Path, name: str, archive: Path) -> BuiltImage:
    """The archive of saved image `name` unpacked as that saved image here (once: one here
    already is kept)."""
    check_name(name)
    if (image := saved_image(saved, name)) is not None:
        return image
    folder = _work_dir(saved, INCOMING) / name
    shutil.rmtree(folder, ignore_errors=True)  # what an unpacking cut short left
    folder.mkdir(mode=0o700)
    try:
        _tar("--extract", "--same-permissions", "--file", str(archive), "-C", str(folder))
        try:
            facts = json.loads((folder / "image.json").read_text())
        except (OSError, ValueError):
            raise HostError(f"the archive of {name!r} has no image facts") from None
        if facts.get("name") != name or not (folder / "rootfs").is_dir():
            raise HostError(f"the archive of {name!r} holds another image, or no rootfs")
        target = saved / name
        shutil.rmtree(target, ignore_errors=True)
        folder.rename(target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    image = saved_image(saved, name)
    if image is None:
        raise HostError(f"the archive of {name!r} has unreadable image facts")
    return image


class ImageCopier(Workers):
    """Runs the transfers the portal lists, each in a thread of its own."""

    def __init__(self, client: PortalClient, saved: Path) -> None:
        super().__init__()
        self._client = client
        self._saved = saved

    def apply(self, transfers: list[dict]) -> None:
        for transfer in transfers:
            key = (str(transfer.get("name")), str(transfer.get("direction")))
            with self._lock:
                if key in self._busy:
                    continue
                self._busy.add(key)
            threading.Thread(
                target=self._run, args=(key, transfer), name=f"image-{key[1]}-{key[0]}"
            ).start()

    def _run(self, key: tuple[str, str], transfer: dict) -> None:
        name, direction = key
        try:
            if direction == "send":
                self._send(name, str(transfer["url"]))
            elif direction == "receive":
                self._receive(name, str(transfer["url"]), str(transfer["sha256"]).lower())
            else:
                logger.error("the portal asked for an unknown transfer %r", transfer)
        except PortalError as error:
            logger.warning("saved image %s (%s): %s; trying again later", name, direction, error)
        except (HostError, KeyError) as error:
            logger.error("saved image %s (%s) failed: %s", name, direction, error)
            try:
                self._client.report_copy(name, error=f"{direction}: {error}")
            except PortalError as unreported:
                logger.warning("saved image %s: failure not reported: %s", name, unreported)
        finally:
            with self._lock:
                self._busy.discard(key)

    def _send(self, name: str, url: str) -> None:
        logger.info("saved image %s: packing it for another server", name)
        archive, sha256 = pack(self._saved, name)
        try:
            self._client.send_archive(url, archive, sha256)
        finally:
            archive.unlink(missing_ok=True)
        logger.info("saved image %s: sent (sha256 %s)", name, sha256)

    def _receive(self, name: str, url: str, sha256: str) -> None:
        if saved_image(self._saved, name) is None:
            archive = _work_dir(self._saved, INCOMING) / f"{name}.tar"
            try:
                arrived = self._client.fetch_archive(url, archive)
                if arrived != sha256:
                    raise HostError(
                        f"the archive of {name!r} arrived with sha256 {arrived}, not {sha256}"
                    )
                unpack(self._saved, name, archive)
            finally:
                archive.unlink(missing_ok=True)
            logger.info("saved image %s: copied here", name)
        self._client.report_copy(name, sha256=sha256)
