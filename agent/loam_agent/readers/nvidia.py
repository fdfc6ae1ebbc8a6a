"""NVIDIA cards through NVML (nvidia-ml-py), the library the driver ships as libnvidia-ml.so.1."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pynvml

from loam_agent.readers.base import (
    AcceleratorReader,
    Card,
    CardSample,
    Health,
    ReaderState,
    ReaderStatus,
)

logger = logging.getLogger(__name__)

MIB = 1 << 20

# A figure this card or driver doesn't offer (no power sensor, ECC off, an older driver without
# the entry point) is an absent figure, not a broken card.
_ABSENT_FIGURE = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)


def _figure(query: Callable[..., Any], *args: Any) -> Any:
    try:
        return query(*args)
    except _ABSENT_FIGURE:
        return None


class NvidiaReader(AcceleratorReader):
    vendor = "nvidia"

    def __init__(self) -> None:
        self._status: ReaderStatus | None = None
        # A card that stops answering can't describe itself any more: it stays in the inventory
        # as last read, and its samples say it is unreachable.
        self._card_by_index: dict[int, Card] = {}

    def available(self) -> ReaderStatus:
        if self._status is not None and self._status.ok:
            return self._status
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            return ReaderStatus(
                ReaderState.LIBRARY_MISSING, "no NVIDIA driver (libnvidia-ml.so.1 not found)"
            )
        except pynvml.NVMLError as error:
            return ReaderStatus(ReaderState.INIT_ERROR, f"NVML did not start: {error}")
        driver = _figure(pynvml.nvmlSystemGetDriverVersion)
        self._status = ReaderStatus(ReaderState.OK, f"driver {driver}" if driver else "")
        return self._status

    def close(self) -> None:
        if self._status is not None and self._status.ok:
            pynvml.nvmlShutdown()
        self._status = None

    def inventory(self) -> list[Card]:
        if not self.available().ok:
            return []
        cards = []
        for index in range(self._count()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                card = Card(
                    vendor=self.vendor,
                    index=index,
                    uuid=pynvml.nvmlDeviceGetUUID(handle),
                    model=pynvml.nvmlDeviceGetName(handle),
                    memory_total_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // MIB,
                    device_path=_device_path(handle),
                )
            except pynvml.NVMLError as error:
                card = self._card_by_index.get(index)
                if card is None:
                    logger.warning("NVIDIA card %d left out of the inventory: %s", index, error)
                    continue
            self._card_by_index[index] = card
            cards.append(card)
        return cards

    def sample(self) -> list[CardSample]:
        if not self.available().ok:
            return []
        samples = []
        for index in range(self._count()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                samples.append(_sample(pynvml.nvmlDeviceGetUUID(handle), handle))
            except pynvml.NVMLError as error:
                known = self._card_by_index.get(index)
                if known is None:
                    logger.warning(
                        "NVIDIA card %d answers nothing, not even its UUID: %s", index, error
                    )
                    continue
                samples.append(_unreachable(known.uuid, str(error)))
        return samples

    def _count(self) -> int:
        try:
            return pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as error:
            logger.error("NVML could not count the cards: %s", error)
            return 0


def _device_path(handle: Any) -> str | None:
    minor = _figure(pynvml.nvmlDeviceGetMinorNumber, handle)
    return None if minor is None else f"/dev/nvidia{minor}"


def _sample(uuid: str, handle: Any) -> CardSample:
    utilization = _figure(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _figure(pynvml.nvmlDeviceGetMemoryInfo, handle)
    power_mw = _figure(pynvml.nvmlDeviceGetPowerUsage, handle)
    temperature = _figure(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    ecc_errors = _figure(
        pynvml.nvmlDeviceGetTotalEccErrors,
        handle,
        pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        pynvml.NVML_VOLATILE_ECC,
    )
    unhealthy = bool(ecc_errors)
    return CardSample(
        uuid=uuid,
        utilization_pct=None if utilization is None else utilization.gpu,
        memory_used_mib=None if memory is None else memory.used // MIB,
        power_w=None if power_mw is None else power_mw / 1000,
        temperature_c=temperature,
        ecc_errors_uncorrected=ecc_errors,
        health=Health.ECC_ERRORS if unhealthy else Health.OK,
        health_message=f"{ecc_errors} uncorrected ECC errors since the driver loaded"
        if unhealthy
        else "",
    )


def _unreachable(uuid: str, reason: str) -> CardSample:
    return CardSample(
        uuid=uuid,
        utilization_pct=None,
        memory_used_mib=None,
        power_w=None,
        temperature_c=None,
        ecc_errors_uncorrected=None,
        health=Health.UNREACHABLE,
        health_message=reason,
    )
