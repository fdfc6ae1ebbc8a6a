"""Id-mapped mounts: the image seen as owned by a host's id range, without changing a file.

A host's root is an overlay whose lower layer is the shared image. Its root user is id `base`
on the server (its user namespace maps 0..65535 inside to base..base+65535), so the image's
files, owned by 0.. on disk, must read as owned by base.. to it. Shifting ownership by chown
touches every file of the image (seconds, and a copy-up of each); an id-mapped bind mount of
the image (mount_setattr(2) with MOUNT_ATTR_IDMAP, Linux 5.12+, under overlayfs 5.19+) shows
it shifted at once, read-only, leaving the image as it is for every other host.

The mapping comes from a user namespace: a throwaway `unshare --user` process whose maps the
agent (root) writes; the mount keeps the namespace alive after the process is gone.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import time
from pathlib import Path

from loam_agent.hosts.model import HostError

IDS = 65536
_AT_FDCWD = -100
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
_AT_EMPTY_PATH = 0x1000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x00100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
# x86_64 and aarch64 share these numbers (the new mount API came after the tables merged).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _syscall(what: str, number: int, *arguments) -> int:
    result = _libc.syscall(number, *arguments)
    if result < 0:
        error = ctypes.get_errno()
        raise HostError(f"{what} failed: {os.strerror(error)}")
    return result


def bind_shifted(source: Path, target: Path, base: int) -> None:
    """Mount `source` read-only at `target`, its ids 0..65535 shown as base..base+65535."""
    holder = subprocess.Popen(["unshare", "--user", "sleep", "30"], stdin=subprocess.DEVNULL)
    try:
        own = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 5
        while os.readlink(f"/proc/{holder.pid}/ns/user") == own:
            if holder.poll() is not None or time.monotonic() > deadline:
                raise HostError("unshare --user did not start: no user namespaces here?")
            time.sleep(0.002)
        for kind in ("uid_map", "gid_map"):
            Path(f"/proc/{holder.pid}/{kind}").write_text(f"0 {base} {IDS}\n")
        namespace = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            tree = _syscall(
                f"open_tree {source}",
                _SYS_OPEN_TREE,
                _AT_FDCWD,
                os.fsencode(source),
                _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC,
            )
            try:
                attributes = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, namespace)
                _syscall(
                    f"id-mapping {source}",
                    _SYS_MOUNT_SETATTR,
                    tree,
                    b"",
                    _AT_EMPTY_PATH,
                    ctypes.byref(attributes),
                    ctypes.sizeof(attributes),
                )
                _syscall(
                    f"mounting {source} at {target}",
                    _SYS_MOVE_MOUNT,
                    tree,
                    b"",
                    _AT_FDCWD,
                    os.fsencode(target),
                    _MOVE_MOUNT_F_EMPTY_PATH,
                )
            finally:
                os.close(tree)
        finally:
            os.close(namespace)
    finally:
        holder.kill()
        holder.wait()


def shift_tree(root: Path, base: int) -> None:
    """Move a tree written by an older agent (ids from 0) into the host's range, once."""
    for folder, directories, files in os.walk(root):
        for name in [*directories, *files]:
            _shift(Path(folder) / name, base)
    _shift(root, base)


def _shift(path: Path, base: int) -> None:
    info = os.lstat(path)
    if info.st_uid < IDS and info.st_gid < IDS:
        os.lchown(path, base + info.st_uid, base + info.st_gid)
        if not stat.S_ISLNK(info.st_mode):
            os.chmod(path, stat.S_IMODE(info.st_mode))  # chown drops setuid and setgid
