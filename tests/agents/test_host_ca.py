"""The web terminal's SSH certificate authority: one key, made 0600 on first use, and one-off
user certificates for root that expire within minutes (read back with OpenSSH's ssh-keygen)."""

import os
import re
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from apps.agents import host_ca


@pytest.fixture
def fresh_ca(settings, tmp_path):
    settings.LOAM_HOST_CA_KEY = tmp_path / "ca" / "ssh_user_ca"
    return settings.LOAM_HOST_CA_KEY


def described(credential, tmp_path) -> str:
    path = tmp_path / "user-cert.pub"
    path.write_bytes(credential.certificate.export_certificate())
    # In UTC: ssh-keygen prints the validity in local time (Django set TZ to the portal's zone).
    return subprocess.run(
        ["ssh-keygen", "-L", "-f", path],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TZ": "UTC"},
    ).stdout


def fingerprint(public_line: str, tmp_path) -> str:
    path = tmp_path / "ca.pub"
    path.write_text(public_line + "\n")
    out = subprocess.run(["ssh-keygen", "-l", "-f", path], capture_output=True, text=True)
    return out.stdout.split()[1]


def test_the_ca_key_is_made_once_private_to_the_portal(fresh_ca):
    public = host_ca.ca_public_key()
    assert public.startswith("ssh-ed25519 ")
    assert fresh_ca.stat().st_mode & 0o777 == 0o600
    assert host_ca.ca_public_key() == public
    # Another process (a fresh cache) reads the same key from the file.
    host_ca._ca_key.cache_clear()
    assert host_ca.ca_public_key() == public


def test_a_user_certificate_is_for_root_signed_by_the_ca_and_short_lived(fresh_ca, tmp_path):
    now = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    credential = host_ca.sign_user_key(key_id="loam-terminal:alice:instance-7", now=now)
    text = described(credential, tmp_path)
    assert "Type: ssh-ed25519-cert-v01@openssh.com user certificate" in text
    assert 'Key ID: "loam-terminal:alice:instance-7"' in text
    assert re.search(r"Principals:\s*\n\s*root\s*\n\s*Critical", text), text
    assert fingerprint(host_ca.ca_public_key(), tmp_path) in text.split("Signing CA:")[1]
    valid = re.search(r"Valid: from (\S+) to (\S+)", text)
    start, end = (datetime.fromisoformat(part).replace(tzinfo=UTC) for part in valid.groups())
    assert end - start == timedelta(minutes=1) + timedelta(seconds=120)
    assert start == now - timedelta(minutes=1)


def test_every_session_gets_a_key_of_its_own(fresh_ca):
    first = host_ca.sign_user_key(key_id="a")
    second = host_ca.sign_user_key(key_id="b")
    assert first.key.export_public_key() != second.key.export_public_key()
