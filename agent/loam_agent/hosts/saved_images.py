"""Saved images: a stopped host's root file system kept as an image of its own.

A host's root is an overlay of its upper layer on a built image. Saving it makes a full copy
of the merged root (the image's files with the host's changes over them), not the upper layer
alone: a built image is replaced in place when its recipe changes (`image.build_image`), and an
upper layer kept over the new one would mix two Debian snapshots; a full copy also boots
through the same path as any image (one read-only, id-mapped lower layer), is copied to another
server as one tree, and outlives the image it came from. It costs the base's size again per
saved image (hundreds of MB for debian-12), which the portal bills per GB-month.

The copy is taken from a read-only overlay of the two layers mounted here without id mapping,
so the base's files read as owned by 0.. and the host's as owned by its range; those are moved
back to 0.. after the copy, as the image's own files are. What the agent writes into a host at
every start from its spec (SSH keys, the CA, service tokens, the GPU loader's files) and its SSH
host keys are left out: a host booted from the image makes its own.

Saved images live in their own folder (state_dir/saved-images, or LOAM_AGENT_SAVED_IMAGE_DIR),
one per name (the portal's image code) as built images do: <name>/rootfs and <name>/image.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from loam_agent.hosts.idmap import IDS
from loam_agent.hosts.image import NAME, BuiltImage, _size_bytes, known_recipes, list_images
from loam_agent.hosts.image import rootfs as image_rootfs
from loam_agent.hosts.model import HostError

# Written into a host at every start from its spec, or made at its first start: never saved.
NOT_SAVED = (
    "root/.ssh/authorized_keys",
    "etc/ssh/loam_user_ca.pub",
    "etc/ssh/sshd_config.d/loam-ca.conf",
    "etc/ld.so.conf.d/loam-gpu.conf",
    "etc/resolv.conf",
)
NOT_SAVED_GLOBS = ("etc/ssh/ssh_host_*", "etc/loam/services/*.env")


@dataclass(frozen=True)
class HostLayers:
    """What a stopped host's root is made of: the image under it, its upper layer and the id
    range that layer is owned by, and the files nspawn left empty for the GPU's binds."""

    host_id: str
    image: Path  # the image's rootfs
    image_digest: str
    upper: Path
    uid_base: int
    gpu_files: tuple[str, ...] = ()


def saved_images_dir(state_dir: Path, override: str | None = None) -> Path:
    return Path(override) if override else state_dir / "saved-images"


def rootfs(saved: Path, name: str) -> Path:
    return saved / name / "rootfs"


def _facts_file(saved: Path, name: str) -> Path:
    return saved / name / "image.json"


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise HostError(f"a saved image's name must be a lower-case slug, not {name!r}")
    if name in known_recipes():
        raise HostError(f"{name!r} is a built image's name: a saved image can't take it")


def saved_image(saved: Path, name: str) -> BuiltImage | None:
    """The saved image `name`, if it is whole (its facts are written last)."""
    try:
        facts = json.loads(_facts_file(saved, name).read_text())
        return BuiltImage(name=name, digest=facts["digest"], size_bytes=facts["size_bytes"])
    except (OSError, ValueError, KeyError):
        return None


def saved_from(saved: Path, name: str) -> str | None:
    """The host the saved image `name` was taken from."""
    try:
        return json.loads(_facts_file(saved, name).read_text())["host"]
    except (OSError, ValueError, KeyError):
        return None


def list_saved(saved: Path) -> list[BuiltImage]:
    if not saved.is_dir():
        return []
    found = (saved_image(saved, path.name) for path in sorted(saved.iterdir()))
    return [image for image in found if image is not None]


def remove_saved(saved: Path, name: str) -> None:
    check_name(name)
    folder = saved / name
    _facts_file(saved, name).unlink(missing_ok=True)  # no longer an image from here on
    shutil.rmtree(folder, ignore_errors=True)


def save_host(saved: Path, name: str, layers: HostLayers) -> BuiltImage:
    """The stopped host's root as the saved image `name`; saved once (a repeated request for
    the same host answers with the image already saved)."""
    check_name(name)
    if (image := saved_image(saved, name)) is not None:
        if saved_from(saved, name) != layers.host_id:
            raise HostError(f"saved image {name!r} exists already, taken from another host")
        return image
    folder = saved / name
    partial = folder / "rootfs.partial"
    shutil.rmtree(folder, ignore_errors=True)  # what a save cut short left
    folder.mkdir(parents=True, mode=0o700)
    saved.chmod(0o700)  # tenants' files: only root on the server reads them
    try:
        _copy_merged(layers, partial)
        _unshift(partial, layers.uid_base)
        _leave_out(partial, layers.gpu_files)
        digest = _digest(layers)
        size = _size_bytes(partial)
        partial.rename(folder / "rootfs")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # no half copy left taking the disk
        raise
    facts = {
        "name": name,
        "host": layers.host_id,
        "base_digest": layers.image_digest,
        "digest": digest,
        "size_bytes": size,
        "saved_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _facts_file(saved, name).write_text(json.dumps(facts, indent=2) + "\n")
    return BuiltImage(name=name, digest=digest, size_bytes=size)


def _copy_merged(layers: HostLayers, target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="loam-save-") as scratch:
        merged = Path(scratch) / "merged"
        merged.mkdir()
        # Two lower layers and no upper: read-only, whiteouts and opaque folders honoured.
        options = f"ro,lowerdir={layers.upper}:{layers.image}"
        _run("mount", "-t", "overlay", "overlay", "-o", options, str(merged))
        try:
            _run("cp", "-a", "--one-file-system", f"{merged}/.", str(target))
        finally:
            _run("umount", str(merged))


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise HostError(f"saving the image: {' '.join(command[:3])}: {result.stderr.strip()}")


def _unshift(root: Path, base: int) -> None:
    """The host's files, owned by its range, owned from 0 as the image's are."""
    for folder, directories, files in os.walk(root):
        for name in [*directories, *files]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if base <= info.st_uid < base + IDS or base <= info.st_gid < base + IDS:
                uid = info.st_uid - base if info.st_uid >= base else info.st_uid
                gid = info.st_gid - base if info.st_gid >= base else info.st_gid
                os.lchown(path, uid, gid)
                if not stat.S_ISLNK(info.st_mode):
                    os.chmod(path, stat.S_IMODE(info.st_mode))  # chown drops setuid, setgid


def _leave_out(root: Path, gpu_files: tuple[str, ...]) -> None:
    paths = [root / relative for relative in NOT_SAVED]
    paths += [path for pattern in NOT_SAVED_GLOBS for path in root.glob(pattern)]
    # nspawn's empty stand-ins for the driver's files bound in at the last start.
    paths += [
        path
        for relative in gpu_files
        if (path := root / relative.lstrip("/")).is_file() and path.stat().st_size == 0
    ]
    for path in paths:
        if path.is_file() or path.is_symlink():
            path.unlink()


def _digest(layers: HostLayers) -> str:
    """sha256 over the base image's digest and what the host changed (each path of its upper
    layer, its type, mode, owner in the host and content): one save of one root, one digest."""
    hasher = hashlib.sha256(f"base {layers.image_digest}\n".encode())
    for folder, directories, files in sorted(os.walk(layers.upper)):
        directories.sort()
        for name in sorted(files) + directories:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            relative = os.path.relpath(path, layers.upper)
            owner = f"{info.st_uid - layers.uid_base}:{info.st_gid - layers.uid_base}"
            hasher.update(f"{relative}\0{info.st_mode:o}\0{owner}\0".encode())
            if stat.S_ISLNK(info.st_mode):
                hasher.update(os.readlink(path).encode())
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as file:
                    hasher.update(hashlib.file_digest(file, "sha256").digest())
            hasher.update(b"\n")
    return "sha256:" + hasher.hexdigest()


def find_image(images: Path, saved: Path, name: str) -> tuple[Path, BuiltImage] | None:
    """The rootfs and facts of the image `name`: built here from its recipe, or saved here."""
    built = next((image for image in list_images(images) if image.name == name), None)
    if built is not None:
        return image_rootfs(images, name), built
    if NAME.fullmatch(name) and (kept := saved_image(saved, name)) is not None:
        return rootfs(saved, name), kept
    return None


def keep_only(saved: Path, keep: set[str], hosts_dir: Path) -> list[str]:
    """Remove the saved images the portal no longer keeps here (its hosts list's
    `saved_images`), except one a host on this server still has as its image (its removal may
    not have run yet: the image is its root's lower layer). Returns those removed."""
    in_use = set()
    for state_file in hosts_dir.glob("*/state.json"):
        try:
            in_use.add(json.loads(state_file.read_text())["image"])
        except (OSError, ValueError, KeyError):
            continue
    removed = []
    for image in list_saved(saved):
        if image.name not in keep and image.name not in in_use:
            remove_saved(saved, image.name)
            removed.append(image.name)
    return removed
