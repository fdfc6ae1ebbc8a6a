"""The SSH certificate authority agent hosts trust for root logins from the web terminal.

Every host's spec carries the CA's public key (`ssh_user_ca_keys`); the agent writes it to the
host's sshd as `TrustedUserCAKeys`. A terminal session signs a fresh key of its own for principal
`root`, valid a couple of minutes, and forgets it once connected: no key to the hosts is stored
anywhere but the CA's own (`settings.LOAM_HOST_CA_KEY`, made mode 0600 on first use).
"""

import functools
import hashlib
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import asyncssh
from django.conf import settings
from django.utils import timezone

PRINCIPAL = "root"
KEY_ALGORITHM = "ssh-ed25519"
# sshd compares the validity with its own clock: a host a little behind the portal still takes it.
CLOCK_SKEW = timedelta(minutes=1)


@dataclass(frozen=True)
class UserCredential:
    """A one-off key and its certificate, as asyncssh's `client_keys` takes them."""

    key: asyncssh.SSHKey
    certificate: asyncssh.SSHCertificate

    def client_keys(self) -> list:
        return [(self.key, self.certificate)]


@functools.cache
def _ca_key(path: Path) -> asyncssh.SSHKey:
    try:
        return asyncssh.read_private_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key(KEY_ALGORITHM, comment="loam-host-ca")
    try:
        # O_EXCL: of two processes making it at once, one writes and both read its key.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return asyncssh.read_private_key(path)
    with os.fdopen(fd, "wb") as file:
        file.write(key.export_private_key())
    return key


def ca_key() -> asyncssh.SSHKey:
    """The CA's private key, made on first use."""
    return _ca_key(Path(settings.LOAM_HOST_CA_KEY))


def ca_public_key() -> str:
    """The CA's public key as one OpenSSH line (what `ssh_user_ca_keys` lists)."""
    return ca_key().export_public_key("openssh").decode().strip()


def ca_tag() -> str:
    """A short tag that changes with the CA's key (the hosts list's ETag carries it)."""
    return hashlib.sha256(ca_public_key().encode()).hexdigest()[:12]


def sign_user_key(*, key_id: str, now=None) -> UserCredential:
    """A new key with a certificate for `root`, valid from a minute ago (clock skew) to
    `LOAM_TERMINAL_CERT_S` from now. `key_id` names the session in the host's sshd log."""
    now = now or timezone.now()
    key = asyncssh.generate_private_key(KEY_ALGORITHM)
    certificate = ca_key().generate_user_certificate(
        key,
        key_id,
        principals=[PRINCIPAL],
        valid_after=int((now - CLOCK_SKEW).timestamp()),
        valid_before=int((now + timedelta(seconds=settings.LOAM_TERMINAL_CERT_S)).timestamp()),
    )
    return UserCredential(key=key, certificate=certificate)
