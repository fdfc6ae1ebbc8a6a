"""Host images: a minimal Debian root file system built once with debootstrap, sshd as PID 1.

Every host's root is an overlay on an image, so the image is built once per server and never
written to again; host keys are generated per host at its first start (in its own upper layer).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)

IMAGES = {"debian-12": "bookworm"}
# pip and curl: a tenant's first commands in a new host fetch something.
PACKAGES = "openssh-server,iproute2,procps,python3-minimal,python3-pip,curl,ca-certificates"

# PID 1 in every host: /run is a fresh tmpfs under nspawn, and keys are made on first start.
START_SSHD = """#!/bin/sh
mkdir -p /run/sshd
[ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A
exec /usr/sbin/sshd -D -e
"""
SSHD_CONFIG = "PermitRootLogin prohibit-password\nUseDNS no\n"


class ImageError(Exception):
    pass


def images_dir(state_dir: Path, override: str | None = None) -> Path:
    """state_dir/images, or LOAM_AGENT_IMAGE_DIR (so CI keeps one built image across runs)."""
    return Path(override) if override else state_dir / "images"


def rootfs(images: Path, name: str) -> Path:
    return images / name / "rootfs"


def recipe_digest(name: str) -> str:
    """What the image is built from: a cached image of another recipe is built again."""
    recipe = "\n".join([IMAGES.get(name, ""), PACKAGES, START_SSHD, SSHD_CONFIG])
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _stamp(images: Path, name: str) -> Path:
    return images / name / "recipe"


def is_built(images: Path, name: str) -> bool:
    try:
        return _stamp(images, name).read_text().strip() == recipe_digest(name)
    except OSError:
        return False


def list_images(images: Path) -> list[str]:
    if not images.is_dir():
        return []
    return sorted(path.name for path in images.iterdir() if is_built(images, path.name))


def build_image(images: Path, name: str, mirror: str, *, rebuild: bool = False) -> Path:
    """Build image `name` under `images` unless it is there already; return its rootfs."""
    if name not in IMAGES:
        raise ImageError(f"unknown image {name!r}; known: {', '.join(sorted(IMAGES))}")
    target = rootfs(images, name)
    if is_built(images, name) and not rebuild:
        logger.info("image %s already built at %s", name, target)
        return target
    # Build beside the target and rename, so a cut-short build never looks like an image.
    partial = images / name / "rootfs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    logger.info("building image %s from %s (a few minutes)", name, mirror)
    result = subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={PACKAGES}",
            IMAGES[name],
            str(partial),
            mirror,
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageError(f"debootstrap failed ({result.returncode}): {result.stderr[-2000:]}")
    start_sshd = partial / "usr/local/sbin/start-sshd"
    start_sshd.write_text(START_SSHD)
    start_sshd.chmod(0o755)
    (partial / "etc/ssh/sshd_config.d/loam.conf").write_text(SSHD_CONFIG)
    for key in (partial / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    _stamp(images, name).write_text(recipe_digest(name) + "\n")
    return target
