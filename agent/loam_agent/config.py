"""The agent's configuration file (TOML).

    # /etc/loam-agent/agent.toml
    portal_url = "https://portal.example.cn"        # where `enrol` goes when --portal isn't given
    credential_path = "/var/lib/loam-agent/credential.json"
    sample_interval_s = 5                           # a sample and a heartbeat every 5 seconds
    ca_bundle = "/etc/loam-agent/portal-ca.pem"     # trust this CA instead of the system's
    state_dir = "/var/lib/loam-agent"               # host images and per-host folders
    hosts_poll_interval_s = 1                       # ask the portal for the desired hosts
    apt_mirror = "http://deb.debian.org/debian"     # where `image build` gets Debian (env MIRROR)
    uplink = "eth0"                  # hosts go out here, masqueraded (default: the default route's)
    public_address = "198.51.100.2"  # tenants reach hosts on it (default: the uplink's IPv4)
    public_ports = [20000, 29999]    # the ports the portal may forward on it (inclusive)
    dns_servers = ["192.0.2.53"]     # given to hosts (default: the server's, loopback left out)

Every key is optional. A missing default file means the defaults; a file named with --config
must exist. An unknown key is an error, so a typo doesn't silently fall back to a default.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_CONFIG_PATH = Path("/etc/loam-agent/agent.toml")
DEFAULT_CREDENTIAL_PATH = Path("/var/lib/loam-agent/credential.json")
DEFAULT_SAMPLE_INTERVAL_S = 5.0
DEFAULT_STATE_DIR = Path("/var/lib/loam-agent")
DEFAULT_APT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_PUBLIC_PORTS = (20000, 29999)


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class AgentConfig:
    portal_url: str | None = None
    credential_path: Path = DEFAULT_CREDENTIAL_PATH
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S
    ca_bundle: Path | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    hosts_poll_interval_s: float = 1.0
    apt_mirror: str = DEFAULT_APT_MIRROR
    uplink: str | None = None
    public_address: str | None = None
    public_ports: tuple[int, int] = DEFAULT_PUBLIC_PORTS
    dns_servers: tuple[str, ...] | None = None


def load_config(path: Path | None = None) -> AgentConfig:
    """Read `path`, or the default file when it exists; the defaults otherwise."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return AgentConfig()
        path = DEFAULT_CONFIG_PATH
    try:
        with path.open("rb") as file:
            values = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    try:
        return _parse(values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _parse(values: dict) -> AgentConfig:
    unknown = sorted(set(values) - set(AgentConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"unknown keys: {', '.join(unknown)}")
    settings = {}
    if "portal_url" in values:
        settings["portal_url"] = parse_portal_url(values["portal_url"])
    if "credential_path" in values:
        settings["credential_path"] = _path(values, "credential_path")
    for key in ("sample_interval_s", "hosts_poll_interval_s"):
        if key in values:
            interval = values[key]
            if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
                raise ConfigError(f"{key} must be a positive number, not {interval!r}")
            settings[key] = float(interval)
    if "state_dir" in values:
        settings["state_dir"] = _path(values, "state_dir")
    if "apt_mirror" in values:
        mirror = values["apt_mirror"]
        if not isinstance(mirror, str) or urlsplit(mirror).scheme not in ("http", "https"):
            raise ConfigError(f"apt_mirror must be an http(s) URL, not {mirror!r}")
        settings["apt_mirror"] = mirror
    if "uplink" in values:
        uplink = values["uplink"]
        if not isinstance(uplink, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", uplink):
            raise ConfigError(f"uplink must be an interface name, not {uplink!r}")
        settings["uplink"] = uplink
    if "public_address" in values:
        address = _address(values["public_address"], "public_address")
        if address.version != 4:  # hosts are reached through IPv4 forwards
            raise ConfigError(f"public_address must be an IPv4 address, not {address}")
        settings["public_address"] = str(address)
    if "public_ports" in values:
        ports = values["public_ports"]
        if (
            not isinstance(ports, list)
            or len(ports) != 2
            or not all(isinstance(port, int) and 1024 <= port <= 65535 for port in ports)
            or ports[0] > ports[1]
        ):
            raise ConfigError(
                f"public_ports must be [first, last] within 1024-65535, not {ports!r}"
            )
        settings["public_ports"] = (ports[0], ports[1])
    if "dns_servers" in values:
        servers = values["dns_servers"]
        if not isinstance(servers, list):
            raise ConfigError(f"dns_servers must be a list of addresses, not {servers!r}")
        settings["dns_servers"] = tuple(str(_address(server, "dns_servers")) for server in servers)
    if "ca_bundle" in values:
        ca_bundle = _path(values, "ca_bundle")
        if not ca_bundle.is_file():
            raise ConfigError(f"ca_bundle {ca_bundle} is not a file")
        settings["ca_bundle"] = ca_bundle
    return AgentConfig(**settings)


def parse_portal_url(value: object) -> str:
    """The portal's base URL without a trailing slash; only http and https."""
    if not isinstance(value, str):
        raise ConfigError(f"portal_url must be a string, not {value!r}")
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        raise ConfigError(f"portal_url must be an http(s) URL, not {value!r}")
    return value.rstrip("/")


def _address(value: object, key: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        raise ConfigError(f"{key} must be an IP address, not {value!r}") from None


def _path(values: dict, key: str) -> Path:
    value = values[key]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a path, not {value!r}")
    return Path(value)
