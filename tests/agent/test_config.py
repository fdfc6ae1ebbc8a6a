from pathlib import Path

import pytest
from loam_agent.config import DEFAULT_CREDENTIAL_PATH, AgentConfig, ConfigError, load_config


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_every_key_is_read(tmp_path):
    ca_bundle = tmp_path / "ca.pem"
    ca_bundle.write_text("")
    path = write(
        tmp_path,
        'portal_url = "https://portal.example.cn/"\n'
        'credential_path = "/srv/loam/credential.json"\n'
        "sample_interval_s = 2.5\n"
        f'ca_bundle = "{ca_bundle}"\n'
        'uplink = "bond0"\npublic_address = "198.51.100.7"\npublic_ports = [30000, 30999]\n'
        'dns_servers = ["192.0.2.53", "2001:db8::53"]\n',
    )

    assert load_config(path) == AgentConfig(
        portal_url="https://portal.example.cn",
        credential_path=Path("/srv/loam/credential.json"),
        sample_interval_s=2.5,
        ca_bundle=ca_bundle,
        uplink="bond0",
        public_address="198.51.100.7",
        public_ports=(30000, 30999),
        dns_servers=("192.0.2.53", "2001:db8::53"),
    )


def test_an_empty_file_means_the_defaults(tmp_path):
    config = load_config(write(tmp_path, ""))

    assert config.sample_interval_s == 5
    assert config.credential_path == DEFAULT_CREDENTIAL_PATH
    assert config.portal_url is None
    assert config.ca_bundle is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('portal_uri = "https://x"\n', "unknown keys: portal_uri"),
        ('portal_url = "ftp://x"\n', "must be an http(s) URL"),
        ("sample_interval_s = 0\n", "positive number"),
        ('sample_interval_s = "5"\n', "positive number"),
        ('ca_bundle = "/nonexistent/ca.pem"\n', "is not a file"),
        ("credential_path = 3\n", "must be a path"),
        ("portal_url = \n", "agent.toml"),
        ('uplink = "eth0; drop"\n', "must be an interface name"),
        ('public_address = "198.51.100.300"\n', "public_address must be an IP address"),
        ('public_address = "2001:db8::2"\n', "public_address must be an IPv4 address"),
        ("public_ports = [80, 8080]\n", "within 1024-65535"),
        ("public_ports = [30000, 20000]\n", "within 1024-65535"),
        ('dns_servers = "192.0.2.53"\n', "dns_servers must be a list"),
        ('dns_servers = ["resolver.lan"]\n', "dns_servers must be an IP address"),
    ],
)
def test_bad_values_are_refused_with_the_reason(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(write(tmp_path, text))


def test_a_named_file_that_is_missing_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml")
