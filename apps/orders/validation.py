"""Checks of what a tenant types into an order: host names and SSH public keys."""

import base64
import binascii
import re
import struct

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

HOSTNAME = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
SSH_KEY_TYPES = {
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
}
MIN_RSA_BITS = 2048


def validate_hostname(value: str) -> None:
    if not HOSTNAME.fullmatch(value):
        raise ValidationError(
            _(
                "Use 1–63 lowercase letters, digits and hyphens, starting with a letter and not "
                "ending with a hyphen (it becomes the host name)."
            ),
            code="hostname",
        )


def validate_ssh_public_key(value: str) -> None:
    """One OpenSSH public key line: `type base64 [comment]`, with a blob of the stated type."""
    if "\n" in value.strip():
        raise ValidationError(_("Paste exactly one key."), code="ssh_format")
    parts = value.strip().split()
    if len(parts) < 2:
        raise ValidationError(
            _("Paste one public key line, like “ssh-ed25519 AAAA… you@laptop”."), code="ssh_format"
        )
    key_type, blob_text = parts[0], parts[1]
    if key_type not in SSH_KEY_TYPES:
        raise ValidationError(
            _("“%(type)s” is not a supported key type; use ssh-ed25519, ecdsa or ssh-rsa.")
            % {"type": key_type[:40]},
            code="ssh_type",
        )
    try:
        blob = base64.b64decode(blob_text, validate=True)
        inner_type, rest = _read_string(blob)
        if inner_type.decode(errors="replace") != key_type:
            raise ValidationError(
                _("The key data says “%(inner)s” but the line says “%(type)s”.")
                % {"inner": inner_type.decode(errors="replace")[:40], "type": key_type},
                code="ssh_mismatch",
            )
        _check_key_material(key_type, rest)
    except (binascii.Error, ValueError, struct.error):
        raise ValidationError(
            _("The key data is not valid base64 of an SSH key: was it cut off?"),
            code="ssh_data",
        ) from None


def _check_key_material(key_type: str, rest: bytes) -> None:
    """The blob after the type must hold a key of that type (raises ValueError if cut off)."""
    if key_type in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
        point, _rest = _read_string(rest)
        if len(point) != 32:
            raise ValueError("an ed25519 key is 32 bytes")
    elif key_type.startswith("ecdsa-"):
        _curve, rest = _read_string(rest)
        point, _rest = _read_string(rest)
        if not point:
            raise ValueError("no ecdsa point")
    elif key_type == "ssh-rsa":
        _exponent, rest = _read_string(rest)
        modulus, _rest = _read_string(rest)
        bits = int.from_bytes(modulus, "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise ValidationError(
                _("This RSA key has %(bits)d bits; use at least %(min)d (or ssh-ed25519).")
                % {"bits": bits, "min": MIN_RSA_BITS},
                code="ssh_weak",
            )


def _read_string(data: bytes) -> tuple[bytes, bytes]:
    if len(data) < 4:
        raise ValueError("truncated")
    (length,) = struct.unpack(">I", data[:4])
    if length > len(data) - 4:
        raise ValueError("truncated")
    return data[4 : 4 + length], data[4 + length :]
