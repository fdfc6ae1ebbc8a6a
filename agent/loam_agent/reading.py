"""One reading of every vendor's reader, and its JSON form on the wire (docs/agent-protocol.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from loam_agent.readers.base import AcceleratorReader, Card, CardSample, ReaderStatus


@dataclass(frozen=True)
class Reading:
    taken_at: datetime
    statuses: dict[str, ReaderStatus]
    cards: list[Card]
    samples: list[CardSample]

    def to_json(self) -> dict:
        return {
            "taken_at": self.taken_at.isoformat().replace("+00:00", "Z"),
            "readers": [
                {"vendor": vendor, "state": str(status.state), "message": status.message}
                for vendor, status in self.statuses.items()
            ],
            "cards": [asdict(card) for card in self.cards],
            "samples": [
                {**asdict(sample), "health": str(sample.health)} for sample in self.samples
            ],
        }


def take_reading(readers: list[AcceleratorReader]) -> Reading:
    statuses, cards, samples = {}, [], []
    for reader in readers:
        statuses[reader.vendor] = reader.available()
        cards += reader.inventory()
        samples += reader.sample()
    return Reading(datetime.now(UTC), statuses, cards, samples)
