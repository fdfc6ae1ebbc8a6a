"""validate_hostname and validate_ssh_public_key: what a tenant types into an order."""

import base64
import struct
from functools import cache

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.core.exceptions import ValidationError

from apps.orders.validation import validate_hostname, validate_ssh_public_key

pytestmark = pytest.mark.usefixtures("english_messages")


def openssh(public_key) -> str:
    return public_key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


@cache
def rsa_key(bits: int) -> str:
    return openssh(rsa.generate_private_key(public_exponent=65537, key_size=bits).public_key())


@cache
def ecdsa_key(curve: str) -> str:
    curves = {"nistp256": ec.SECP256R1, "nistp384": ec.SECP384R1, "nistp521": ec.SECP521R1}
    return openssh(ec.generate_private_key(curves[curve]()).public_key())


@cache
def ed25519_key() -> str:
    return openssh(ed25519.Ed25519PrivateKey.generate().public_key())


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def line(key_type: str, blob: bytes, comment: str = "") -> str:
    return f"{key_type} {base64.b64encode(blob).decode()} {comment}".strip()


def code_of(value: str) -> str:
    with pytest.raises(ValidationError) as excinfo:
        validate_ssh_public_key(value)
    return excinfo.value.code


# --- host names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "z9", "gpu-host", "a-b-c-1", "x" * 63, "a" + "-" * 61 + "b"])
def test_valid_host_names(name):
    validate_hostname(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "A",
        "Gpu",
        "1gpu",
        "-gpu",
        "gpu-",
        "gpu_host",
        "gpu.host",
        "gpu host",
        " gpu",
        "héte",
        "x" * 64,
        "a-",
    ],
)
def test_invalid_host_names(name):
    with pytest.raises(ValidationError) as excinfo:
        validate_hostname(name)

    assert excinfo.value.code == "hostname"


def test_a_trailing_newline_is_not_part_of_a_host_name():
    with pytest.raises(ValidationError):
        validate_hostname("gpu\n")


# --- SSH public keys: accepted ---------------------------------------------------------------


def test_ed25519_key():
    validate_ssh_public_key(ed25519_key())
    validate_ssh_public_key(ed25519_key() + " me@laptop")


@pytest.mark.parametrize("curve", ["nistp256", "nistp384", "nistp521"])
def test_ecdsa_keys(curve):
    key = ecdsa_key(curve)
    assert key.startswith(f"ecdsa-sha2-{curve} ")

    validate_ssh_public_key(key + " ops@ci")


@pytest.mark.parametrize("bits", [2048, 4096])
def test_rsa_keys_of_enough_bits(bits):
    validate_ssh_public_key(rsa_key(bits) + " old@server")


def test_a_security_key_ed25519():
    blob = ssh_string(b"sk-ssh-ed25519@openssh.com") + ssh_string(bytes(32)) + ssh_string(b"ssh:")

    validate_ssh_public_key(line("sk-ssh-ed25519@openssh.com", blob, "yubikey"))


def test_surrounding_whitespace_and_a_comment_with_spaces_are_fine():
    validate_ssh_public_key(f"  {ed25519_key()} Jane Doe's laptop  \n")


# --- SSH public keys: refused ----------------------------------------------------------------


def test_a_weak_rsa_key():
    with pytest.raises(ValidationError) as excinfo:
        validate_ssh_public_key(rsa_key(1024))

    assert excinfo.value.code == "ssh_weak"
    assert "1024 bits" in excinfo.value.messages[0]
    assert "2048" in excinfo.value.messages[0]


def test_a_type_that_does_not_match_the_key_data():
    _type, data = ed25519_key().split()

    with pytest.raises(ValidationError) as excinfo:
        validate_ssh_public_key(f"ssh-rsa {data}")

    assert excinfo.value.code == "ssh_mismatch"
    assert "ssh-ed25519" in excinfo.value.messages[0]
    assert "ssh-rsa" in excinfo.value.messages[0]


def test_an_ecdsa_curve_that_does_not_match():
    _type, data = ecdsa_key("nistp384").split()

    assert code_of(f"ecdsa-sha2-nistp256 {data}") == "ssh_mismatch"


@pytest.mark.parametrize(
    "data",
    [
        "not-base64!",
        "AAAAC3NzaC1lZDI1NTE",  # not a multiple of 4 characters: cut off
        "AAAA",  # three bytes: not even a length prefix
        "AAAAHHNzaC1lZDI1NTE5",  # the type string claims more bytes than there are
        "====",
    ],
)
def test_key_data_that_is_not_valid(data):
    assert code_of(f"ssh-ed25519 {data}") == "ssh_data"


@pytest.mark.parametrize("key_type", ["ssh-dss", "ecdsa-sha2-nistp999", "SSH-ED25519", "rsa"])
def test_an_unknown_type(key_type):
    _type, data = ed25519_key().split()

    assert code_of(f"{key_type} {data}") == "ssh_type"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "ssh-ed25519",
        "AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7",
    ],
)
def test_not_one_key_line(value):
    assert code_of(value) == "ssh_format"


def test_two_keys():
    assert code_of(f"{ed25519_key()}\n{rsa_key(2048)}") == "ssh_format"
    assert code_of(f"{ed25519_key()} a\r\n{ed25519_key()} b") == "ssh_format"


def test_a_private_key_pasted_by_mistake():
    private = (
        ed25519.Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )

    assert code_of(private) == "ssh_format"


@pytest.mark.parametrize("keep_bytes", [11, 15, 200])
def test_cut_off_rsa_key_data_is_refused(keep_bytes):
    _type, data = rsa_key(2048).split()
    blob = base64.b64decode(data)[:keep_bytes]

    assert code_of(line("ssh-rsa", blob)) == "ssh_data"


@pytest.mark.parametrize("key", [b"", b"12345"])
def test_ed25519_key_data_must_hold_a_key(key):
    blob = ssh_string(b"ssh-ed25519") + (ssh_string(key) if key else b"")

    assert code_of(line("ssh-ed25519", blob)) == "ssh_data"
