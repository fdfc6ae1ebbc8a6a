"""The simulator's model of the work on its nodes: deterministic, and one model for a card, the
node it sits in, the host that holds it and the park's measured utilization.

What a card reads follows from who holds it (the `held` the portal passes to `telemetry`):

- a card nobody holds reads 0 %: nothing runs on it;
- a held card is idle or busy by a stable draw per card (seed, node, index; a share
  `idle_share` of cards is idle): an idle one reads 0-2 %, a busy one a steady level of
  35-95 % that swings slowly (±8 points over an hour or three) with a little noise per minute;
- a scripted reading (config `utilization`: {node: {index: pct}}) replaces the model for that
  card, held or not.

A host's figures (`host_figures`) follow from the cards it holds at that minute: its GPU
utilization is the mean of what those same cards read in the node's telemetry, their memory
and power follow from it, and so do its CPU, memory and network (a host whose cards idle idles
too). A host without cards reads 0 on its GPU charts. A stopped host is never asked (the portal
samples running hosts only), so it shows nothing.
"""

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from apps.orchestration.backends.base import HostLoad, HostMetrics

IDLE_MAX_PCT = 2.0
BUSY_MIN_PCT, BUSY_SPAN_PCT = 35.0, 60.0
SWING_PCT = 8.0
NOISE_PCT = 2.0
# What a host's network carries at most where its bandwidth is not shaped (0 Mbps).
UNSHAPED_MBPS = 100
# A card draws this share of its TDP doing nothing, the rest in proportion to its utilization.
IDLE_POWER_SHARE = 0.15


def _draws(*parts) -> bytes:
    """32 stable pseudo-random bytes for `parts` (the same parts, the same bytes)."""
    return hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()


def _unit(byte: int) -> float:
    return byte / 255


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


@dataclass(frozen=True)
class CardProfile:
    """A held card's steady behaviour: idle, or busy at `level` %, swinging with `period_min`
    minutes from `phase`."""

    busy: bool
    level: float
    period_min: float
    phase: float


@dataclass(frozen=True)
class LoadModel:
    seed: object = None
    idle_share: float = 0.2
    scripted: Mapping[str, Mapping[int, float]] = field(default_factory=dict)

    def profile(self, node: str, index: int) -> CardProfile:
        # The first two bytes are the draw the simulator has always made per card, so a card
        # idle (or busy at a level) before stays so.
        digest = _draws(self.seed, node, index)
        draw, spread = _unit(digest[0]), _unit(digest[1])
        if draw < self.idle_share:
            level = round(spread * IDLE_MAX_PCT, 1)
            return CardProfile(busy=False, level=level, period_min=0, phase=0)
        return CardProfile(
            busy=True,
            level=BUSY_MIN_PCT + spread * BUSY_SPAN_PCT,
            period_min=60 + _unit(digest[2]) * 120,
            phase=_unit(digest[3]) * 2 * math.pi,
        )

    def card_utilization(self, node: str, index: int, *, held: bool, minute: int) -> float:
        """What the card reads at `minute` (minutes since the epoch), in %."""
        scripted = self.scripted.get(node, {}).get(index)
        if scripted is not None:
            return float(scripted)
        if not held:
            return 0.0
        profile = self.profile(node, index)
        if not profile.busy:
            return profile.level
        swing = SWING_PCT * math.sin(2 * math.pi * minute / profile.period_min + profile.phase)
        noise = (_unit(_draws(self.seed, node, index, minute)[0]) - 0.5) * 2 * NOISE_PCT
        return round(_clamp(profile.level + swing + noise, 5.0, 100.0), 1)

    def _memory_share(self, node: str, index: int, utilization: float) -> float:
        """The share of a held card's memory in use: a little while idle, and steady while busy
        (a loaded model does not come and go with the load)."""
        if self.scripted.get(node, {}).get(index) is not None:
            level = utilization
        else:
            profile = self.profile(node, index)
            level = profile.level if profile.busy else 0.0
        return 0.02 if level < BUSY_MIN_PCT / 2 else 0.25 + 0.6 * level / 100

    def host_figures(self, load: HostLoad, minute: int) -> HostMetrics:
        """The host's figures at `minute`, from the cards it holds and its shape."""
        cards = tuple(load.accelerator_indices)
        utils = [
            self.card_utilization(load.node, index, held=True, minute=minute) for index in cards
        ]
        gpu = sum(utils) / len(utils) if utils else 0.0
        memory_mib = load.card_memory_mib or 0
        gpu_memory = sum(
            memory_mib * self._memory_share(load.node, index, util)
            for index, util in zip(cards, utils, strict=True)
        )
        tdp = load.card_tdp_w or 0
        power = sum(tdp * (IDLE_POWER_SHARE + (1 - IDLE_POWER_SHARE) * u / 100) for u in utils)
        host = _draws(self.seed, "host", load.handle)
        noise = _unit(_draws(self.seed, "host", load.handle, minute)[0]) - 0.5
        wave = math.sin(2 * math.pi * minute / (30 + host[0] % 30) + _unit(host[1]) * 6.283)
        cpu = _clamp(3 + 0.5 * gpu + 4 * wave + 3 * noise, 0.0, 100.0)
        memory_limit = load.ram_gb * 1024
        memory = memory_limit * _clamp(0.08 + 0.5 * gpu / 100 + 0.02 * wave, 0.02, 0.95)
        disk_size = load.disk_gb * 1024
        disk = disk_size * _clamp(0.05 + 0.5 * _unit(host[2]) + 0.005 * wave, 0.0, 1.0)
        line = (load.bandwidth_mbps or UNSHAPED_MBPS) * 1_000_000 / 8  # bytes a second
        rx = line * _clamp((0.01 + 0.25 * gpu / 100) * (1 + 0.5 * wave), 0.0, 1.0)
        tx = rx * (0.2 + 0.3 * _unit(host[3]))
        return HostMetrics(
            handle=load.handle,
            gpu_count=len(cards),
            gpu_utilization_pct=round(gpu, 1),
            gpu_memory_used_mib=round(gpu_memory),
            gpu_memory_total_mib=memory_mib * len(cards) if memory_mib else None,
            power_w=round(power, 1) if tdp else None,
            cpu_pct=round(cpu, 1),
            memory_used_mib=round(memory),
            memory_limit_mib=memory_limit,
            disk_used_mib=round(disk) if disk_size else None,
            disk_size_mib=disk_size or None,
            net_rx_bytes_per_s=round(rx, 1),
            net_tx_bytes_per_s=round(tx, 1),
            simulated=True,
        )
