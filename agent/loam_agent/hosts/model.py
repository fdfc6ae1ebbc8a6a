"""What the portal wants of a host, and what the agent reports it is (docs/agent-protocol.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_MESSAGE = 2000


class HostError(Exception):
    """A host can't be brought to the desired state; the message goes to the operator as is."""


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

    @classmethod
    def from_json(cls, value: dict) -> DesiredHost:
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
            )
        except (KeyError, TypeError, ValueError) as error:
            raise HostError(f"the portal sent an unusable host {value!r}: {error}") from None
        if host.state not in ("running", "stopped"):
            raise HostError(f"host {host.id}: unknown desired state {host.state!r}")
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

    def to_json(self) -> dict:
        running = self.state == "running"
        return {
            "id": self.id,
            "generation": self.generation,
            "state": self.state,
            "address": self.address if running else None,
            "ssh_port": self.ssh_port if running else None,
            "message": self.message[:MAX_MESSAGE],  # the portal keeps 2000 characters
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
    extra: dict = field(default_factory=dict)
