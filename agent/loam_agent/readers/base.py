"""The one interface every vendor's reader implements, and the figures it returns.

Units are in the names (MiB, W, C, %) because they travel as they are to the portal
(docs/agent-protocol.md). A figure a card cannot report is None, never a made-up zero.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from enum import StrEnum


class ReaderState(StrEnum):
    OK = "ok"
    # The vendor's management library is not installed: for NVIDIA, no driver.
    LIBRARY_MISSING = "library_missing"
    # The library is there but refused to start (driver not loaded, permissions, version mismatch).
    INIT_ERROR = "init_error"
    # Neither the vendor's tool nor its library is on this server.
    NOT_PRESENT = "not_present"
    # The vendor's tool or library is there, but this agent version cannot read it yet.
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class ReaderStatus:
    state: ReaderState
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.state is ReaderState.OK


class Health(StrEnum):
    OK = "ok"
    # Uncorrectable memory errors since the driver loaded: the card's results can't be trusted.
    ECC_ERRORS = "ecc_errors"
    # The card stopped answering (fell off the bus, needs a reset).
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Card:
    vendor: str
    index: int
    uuid: str
    model: str
    memory_total_mib: int
    # The device file a container gets bound in, e.g. /dev/nvidia0; None when the driver won't say.
    device_path: str | None


@dataclass(frozen=True)
class CardSample:
    uuid: str
    utilization_pct: int | None
    memory_used_mib: int | None
    power_w: float | None
    temperature_c: int | None
    # Volatile uncorrected ECC errors; None when the card has no ECC or doesn't report it.
    ecc_errors_uncorrected: int | None
    health: Health
    # Why the card is unhealthy, in the vendor library's words; empty when healthy.
    health_message: str = ""


class AcceleratorReader(abc.ABC):
    """Reads one vendor's accelerators; `inventory` and `sample` are [] unless `available` is ok."""

    vendor: str

    @abc.abstractmethod
    def available(self) -> ReaderStatus:
        """Whether this vendor's accelerators can be read here, and if not, why."""

    @abc.abstractmethod
    def inventory(self) -> list[Card]:
        """The cards, their identity and capacity."""

    @abc.abstractmethod
    def sample(self) -> list[CardSample]:
        """Each card's live figures, now."""

    def close(self) -> None:  # noqa: B027 -- readers without a library session have nothing to close
        """Let go of the vendor library; `available` opens it again."""
