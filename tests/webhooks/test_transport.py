"""The POST itself: which addresses it may go to, that it connects only to the addresses it
checked, and that over https it still presents the endpoint's name (SNI, certificate, Host)."""

import ssl
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from apps.webhooks import transport

PARTNER = "hooks.partner.test"


@pytest.mark.parametrize(
    ("url", "blocked"),
    [
        ("http://127.0.0.1:8000/x", True),
        ("http://10.1.2.3/x", True),
        ("http://192.168.0.7/x", True),
        ("http://169.254.169.254/latest/meta-data", True),
        ("http://[::1]/x", True),
        ("http://localhost/x", True),
        ("https://8.8.8.8/x", False),  # a literal public address: no DNS query, no traffic
        # IPv6 forms of private IPv4 addresses (issue 18): mapped, compatible, NAT64, 6to4.
        ("http://[::ffff:127.0.0.1]/x", True),
        ("http://[::127.0.0.1]/x", True),
        ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data", True),
        ("http://[64:ff9b:1::a00:1]/x", True),
        ("http://[2002:a9fe:a9fe::1]/x", True),
        ("http://[2002:c0a8:1::1]/x", True),
        ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x", True),  # Teredo, documentation v4
        ("http://[fe80::1%25eth0]/x", True),
        ("http://[fe80::1%25no-such-interface]/x", True),
        # ... and of public ones, which stay public.
        ("https://[64:ff9b::808:808]/x", False),
        ("https://[2002:808:808::1]/x", False),
        ("https://[2606:4700:4700::1111]/x", False),
    ],
)
def test_blocked_destinations(settings, url, blocked):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    if blocked:
        with pytest.raises(transport.DestinationRefused, match="not a public address"):
            transport.resolve(url)
    else:  # not refused: it goes on to resolve, which tests may not do off loopback
        with pytest.raises(OSError, match="only loopback is reachable"):
            transport.resolve(url)


def test_every_address_of_a_name_is_checked(settings, fake_dns):
    settings.LOAM_WEBHOOKS_ALLOW_PRIVATE = False
    fake_dns(PARTNER, ["93.184.215.14", "10.0.0.5"])

    with pytest.raises(transport.DestinationRefused, match="resolves to 10.0.0.5"):
        transport.resolve(f"https://{PARTNER}/hooks")


def test_an_address_that_refuses_gives_way_to_the_next_one_checked(receiver, fake_dns):
    """127.0.0.2 is loopback too, but nothing listens there: the POST goes on to 127.0.0.1,
    by address, with the name in the Host header."""
    fake_dns(PARTNER, ["127.0.0.2", "127.0.0.1"])

    status, error = transport.post(
        f"http://{PARTNER}:{receiver.port}/hooks?v=1", body=b"{}", headers={}
    )

    assert (status, error) == (200, "")
    (received,) = receiver.requests
    assert received.path == "/hooks?v=1"
    assert received.headers["Host"] == f"{PARTNER}:{receiver.port}"


@pytest.fixture
def partner_tls(tmp_path, monkeypatch):
    """A server context with a certificate for PARTNER from a test CA, which the system trust
    store is made to include (SSL_CERT_FILE, read when a default context is made)."""
    now = datetime.now(UTC)

    def certificate(subject, issuer, public_key, signing_key, *extensions):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signing_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Loam test CA")])
    usage = dict.fromkeys(
        ["content_commitment", "data_encipherment", "key_agreement", "encipher_only"], False
    )
    ca = certificate(
        ca_name,
        ca_name,
        ca_key.public_key(),
        ca_key,
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                key_encipherment=False,
                decipher_only=False,
                **usage,
            ),
            True,
        ),
    )
    leaf = certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, PARTNER)]),
        ca_name,
        key.public_key(),
        ca_key,
        (x509.SubjectAlternativeName([x509.DNSName(PARTNER)]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
    )
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "leaf.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    return server


def test_https_connects_to_the_checked_address_and_presents_the_name(
    start_receiver, fake_dns, partner_tls
):
    receiver = start_receiver(tls=partner_tls)
    fake_dns(PARTNER, ["127.0.0.1"])

    status, error = transport.post(
        f"https://{PARTNER}:{receiver.port}/hooks", body=b"{}", headers={}
    )

    assert (status, error) == (200, "")
    assert receiver.server_names == [PARTNER]  # SNI
    (received,) = receiver.requests
    assert received.headers["Host"] == f"{PARTNER}:{receiver.port}"


def test_https_refuses_a_certificate_that_is_not_for_the_name(
    start_receiver, fake_dns, partner_tls
):
    receiver = start_receiver(tls=partner_tls)
    fake_dns("other.partner.test", ["127.0.0.1"])

    status, error = transport.post(
        f"https://other.partner.test:{receiver.port}/hooks", body=b"{}", headers={}
    )

    assert status is None
    assert error.startswith("SSLError: ") and "certificate verify failed" in error
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Service\r\n\tUnavailable\x00", "Service Unavailable"),
        ("\x1b[31mred\x1b[0m", "[31mred [0m"),
        ("evil\u202etxt.exe", "evil txt.exe"),  # a right-to-left override
        ("é" * 300, "é" * transport.EXCERPT_CHARS),
    ],
)
def test_an_excerpt_keeps_only_a_little_printable_text(text, kept):
    assert transport.excerpt(text) == kept
