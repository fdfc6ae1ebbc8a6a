"""What the portal wants of a host, and what the agent reports it is (docs/agent-protocol.md)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loam_agent.hosts.volumes import HostVolume

MAX_MESSAGE = 2000
PROTOCOLS = ("tcp", "udp")
GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# It names folders, a network namespace and an nspawn machine: nothing else may be in it.
HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# It names the service's env file in the host.
SERVICE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# JuiceFS's own rule for a volume name; it also names the mount's folder (shared_fs.py).
VOLUME_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")


class HostError(Exception):
    """A host can't be brought to the desired state; the message goes to the operator as is."""


def _port(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ValueError(f"{what} must be a port number 1-65535, not {value!r}")
    return value


def _protocol(value: object) -> str:
    if value not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {value!r}")
    return str(value)


@dataclass(frozen=True)
class PortForward:
    """A port of the server's public address forwarded to a port of the host."""

    protocol: str
    server_port: int
    host_port: int
    purpose: str = "mapping"

    @classmethod
    def from_json(cls, value: dict) -> PortForward:
        return cls(
            protocol=_protocol(value["protocol"]),
            server_port=_port(value["server_port"], "server_port"),
            host_port=_port(value["host_port"], "host_port"),
            purpose=str(value.get("purpose", "mapping")),
        )


@dataclass(frozen=True)
class IngressRule:
    """Inbound traffic the host's security group lets in (ports on the host's side)."""

    protocol: str
    from_port: int
    to_port: int
    source: str

    @classmethod
    def from_json(cls, value: dict) -> IngressRule:
        first = _port(value["from_port"], "from_port")
        last = _port(value["to_port"], "to_port")
        if first > last:
            raise ValueError(f"from_port {first} is above to_port {last}")
        source = ipaddress.ip_network(str(value["source"]), strict=False)
        return cls(_protocol(value["protocol"]), first, last, str(source))


@dataclass(frozen=True)
class HostNetwork:
    """The host's group (hosts of one group on a server reach each other), its forwarded ports,
    its ingress rules, and the public IPv4 address the park routes to this server for it, if
    any (then every port of that address is the host's, and it goes out from it). An empty
    group reaches only itself."""

    group: str = ""
    ports: tuple[PortForward, ...] = ()
    ingress: tuple[IngressRule, ...] = ()
    public_ip: str = ""

    @classmethod
    def from_json(cls, value: dict | None) -> HostNetwork:
        if not value:
            return cls()
        group = str(value.get("group") or "")
        if group and not GROUP_NAME.fullmatch(group):
            raise ValueError(f"network group {group!r} is not a plain name")
        ports = tuple(PortForward.from_json(port) for port in value.get("ports") or ())
        seen = [(port.protocol, port.server_port) for port in ports]
        if len(set(seen)) != len(seen):
            raise ValueError("a server port is forwarded twice")
        public_ip = str(value.get("public_ip") or "")
        if public_ip and ipaddress.ip_address(public_ip).version != 4:
            raise ValueError(f"public_ip must be an IPv4 address, not {public_ip!r}")
        return cls(
            group=group,
            ports=ports,
            ingress=tuple(IngressRule.from_json(rule) for rule in value.get("ingress") or ()),
            public_ip=public_ip,
        )

    def to_json(self) -> dict:
        return {
            "group": self.group,
            "ports": [port.__dict__ for port in self.ports],
            "ingress": [rule.__dict__ for rule in self.ingress],
            "public_ip": self.public_ip,
        }


@dataclass(frozen=True)
class HostService:
    """A service the host's init starts (JupyterLab, TensorBoard): its port inside the host, the
    path the portal serves it under and the token the portal presents to it."""

    name: str
    port: int
    base_url: str
    token: str

    @classmethod
    def from_json(cls, value: dict) -> HostService:
        name = str(value["name"])
        if not SERVICE_NAME.fullmatch(name):
            raise ValueError(f"service name {name!r} is not a plain lower-case name")
        base_url = str(value["base_url"])
        if not (base_url.startswith("/") and base_url.endswith("/")):
            raise ValueError(f"service base_url must start and end with '/', not {base_url!r}")
        return cls(name, _port(value["port"], "service port"), base_url, str(value["token"]))


def _services(values: list | None) -> tuple[HostService, ...]:
    services = tuple(HostService.from_json(value) for value in values or ())
    names = [service.name for service in services]
    if len(set(names)) != len(names):
        raise ValueError("a service is listed twice")
    return services


@dataclass(frozen=True)
class SharedFs:
    """The organization's shared file storage, mounted at /shared (shared_fs.py)."""

    name: str
    meta_url: str
    storage: str
    bucket: str
    capacity_gb: int

    @classmethod
    def from_json(cls, value: dict | None) -> SharedFs | None:
        if not value:
            return None
        shared = cls(
            name=str(value["name"]),
            meta_url=str(value["meta_url"]),
            storage=str(value["storage"]),
            bucket=str(value["bucket"]),
            capacity_gb=int(value["capacity_gb"]),
        )
        if not VOLUME_NAME.fullmatch(shared.name):
            raise ValueError(f"shared file system name {shared.name!r} is not a JuiceFS name")
        if shared.capacity_gb < 1:
            raise ValueError(
                f"shared file system capacity must be >= 1 GB, not {shared.capacity_gb}"
            )
        return shared


@dataclass(frozen=True)
class DesiredHost:
    id: str
    generation: int
    state: str
    card_uuids: tuple[str, ...] = ()
    vcpu: int = 1
    memory_mib: int = 1024
    system_disk_gb: int = 0
    data_disk_gb: int = 1
    bandwidth_mbps: int = 0
    image: str = "debian-12"
    ssh_public_keys: tuple[str, ...] = ()
    ssh_user_ca_keys: tuple[str, ...] = ()
    services: tuple[HostService, ...] = ()
    network: HostNetwork = HostNetwork()
    shared_fs: SharedFs | None = None
    save_image: str = ""  # a stopped host's root saved as this image (saved_images.py)
    volumes: tuple[HostVolume, ...] = ()

    @classmethod
    def from_json(cls, value: dict) -> DesiredHost:
        # Here: volumes.py raises this module's HostError.
        from loam_agent.hosts.volumes import host_volumes

        try:
            host = cls(
                id=str(value["id"]),
                generation=int(value["generation"]),
                state=str(value["state"]),
                card_uuids=tuple(value.get("card_uuids") or ()),
                vcpu=int(value.get("vcpu", 1)),
                memory_mib=int(value.get("memory_mib", 1024)),
                system_disk_gb=int(value.get("system_disk_gb", 0)),
                data_disk_gb=int(value.get("data_disk_gb", 1)),
                bandwidth_mbps=int(value.get("bandwidth_mbps", 0)),
                image=str(value.get("image", "debian-12")),
                ssh_public_keys=tuple(value.get("ssh_public_keys") or ()),
                ssh_user_ca_keys=tuple(str(key) for key in value.get("ssh_user_ca_keys") or ()),
                services=_services(value.get("services")),
                network=HostNetwork.from_json(value.get("network")),
                shared_fs=SharedFs.from_json(value.get("shared_fs")),
                save_image=str(value.get("save_image") or ""),
                volumes=host_volumes(value.get("volumes")),
            )
        except (KeyError, TypeError, ValueError) as error:
            # The shared file system's URLs carry its credentials: never in a host's message.
            secret = isinstance(value, dict) and value.get("shared_fs")
            shown = {**value, "shared_fs": "…"} if secret else value
            raise HostError(f"the portal sent an unusable host {shown!r}: {error}") from None
        if not HOST_ID.fullmatch(host.id):
            raise HostError(f"the portal sent a host id the agent can't use: {host.id!r}")
        if host.state not in ("running", "stopped"):
            raise HostError(f"host {host.id}: unknown desired state {host.state!r}")
        if host.save_image and host.state != "stopped":
            raise HostError(f"host {host.id}: an image is saved only from a stopped host")
        return host


@dataclass
class HostStatus:
    """A host as it actually is: reported to the portal."""

    id: str
    generation: int
    state: str  # creating | running | stopped | failed | removed
    address: str = ""
    ssh_port: int = 22
    message: str = ""
    ssh_host_keys: tuple[str, ...] = ()  # what its sshd presents ("type base64"), when running
    saved_image: dict | None = None  # {"name", "digest", "size_bytes"} once saved

    def to_json(self) -> dict:
        running = self.state == "running"
        saved = {"saved_image": self.saved_image} if self.saved_image else {}
        return {
            "id": self.id,
            "generation": self.generation,
            "state": self.state,
            "address": self.address if running else None,
            "ssh_port": self.ssh_port if running else None,
            "message": self.message[:MAX_MESSAGE],  # the portal keeps 2000 characters
            "ssh_host_keys": list(self.ssh_host_keys) if running else [],
            **saved,
        }


@dataclass
class ActualHost:
    """What the runtime has for one host."""

    id: str
    running: bool
    address: str
    card_uuids: tuple[str, ...] = ()
    vcpu: int = 0
    memory_mib: int = 0
    data_disk_gb: int = 0
    bandwidth_mbps: int = 0
    network: HostNetwork = HostNetwork()
    extra: dict = field(default_factory=dict)
