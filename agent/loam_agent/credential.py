"""The server's credential, issued by the portal at enrolment and kept in one file.

The file holds the portal that issued it too: a credential is good at that portal only.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path


class CredentialError(Exception):
    pass


@dataclass(frozen=True)
class Credential:
    portal_url: str
    server_id: str
    secret: str

    def __repr__(self) -> str:
        # Keeps the secret out of tracebacks and logs.
        return f"Credential(portal_url={self.portal_url!r}, server_id={self.server_id!r})"


def save_credential(path: Path, credential: Credential) -> None:
    """Write the file mode 0600, atomically: a reader sees the old file or the whole new one."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkstemp creates the file 0600 in the same directory, so the rename stays on one filesystem.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump(asdict(credential), file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load_credential(path: Path) -> Credential:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise CredentialError(
            f"no credential at {path}: enrol this server first (loam-agent enrol)"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialError(
            f"{path} is open to other users (mode {stat.filemode(mode)}); chmod 600 it"
        )
    try:
        values = json.loads(path.read_text())
        return Credential(
            portal_url=values["portal_url"], server_id=values["server_id"], secret=values["secret"]
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CredentialError(f"{path} is not a credential file: {error!r}") from None
