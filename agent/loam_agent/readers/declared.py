"""Vendors this agent version knows of but cannot read yet: Huawei Ascend, Hygon DCU, Cambricon MLU.

Each says whether its management tool or library is on this server, so an operator enrolling
such a server learns why its cards don't show; none reports a figure it hasn't read.
"""

from __future__ import annotations

import os
import shutil

from loam_agent.readers.base import AcceleratorReader, Card, CardSample, ReaderState, ReaderStatus


class DeclaredReader(AcceleratorReader):
    def __init__(
        self, *, vendor: str, label: str, tools: tuple[str, ...], paths: tuple[str, ...]
    ) -> None:
        self.vendor = vendor
        self._label = label
        # Looked up on PATH.
        self._tools = tools
        # Where the vendor's installer puts its tool or library when PATH doesn't name it.
        self._paths = paths

    def available(self) -> ReaderStatus:
        found = self._find()
        if found is None:
            return ReaderStatus(
                ReaderState.NOT_PRESENT,
                f"{self._label}: no {' or '.join(self._tools)} and no vendor library found",
            )
        return ReaderStatus(
            ReaderState.UNSUPPORTED,
            f"{self._label} detected ({found}) but not supported by this agent version",
        )

    def inventory(self) -> list[Card]:
        return []

    def sample(self) -> list[CardSample]:
        return []

    def _find(self) -> str | None:
        for tool in self._tools:
            if found := shutil.which(tool):
                return found
        return next((path for path in self._paths if os.path.exists(path)), None)


def ascend_reader() -> DeclaredReader:
    # npu-smi is the command line; DCMI (libdcmi.so) the library it and the device plugin use.
    return DeclaredReader(
        vendor="ascend",
        label="Huawei Ascend NPU",
        tools=("npu-smi",),
        paths=(
            "/usr/local/sbin/npu-smi",
            "/usr/local/dcmi/libdcmi.so",
            "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
        ),
    )


def hygon_reader() -> DeclaredReader:
    # Hygon's DTK ships hy-smi; older stacks ship ROCm's rocm-smi, which a DCU answers to.
    return DeclaredReader(
        vendor="hygon",
        label="Hygon DCU",
        tools=("hy-smi", "rocm-smi"),
        paths=("/opt/hyhal/bin/hy-smi", "/opt/rocm/bin/rocm-smi"),
    )


def cambricon_reader() -> DeclaredReader:
    # cnmon is the command line; CNDev (libcndev.so) the library under it.
    return DeclaredReader(
        vendor="cambricon",
        label="Cambricon MLU",
        tools=("cnmon",),
        paths=("/usr/local/neuware/bin/cnmon", "/usr/local/neuware/lib64/libcndev.so"),
    )
