"""The numbers of the agent's host reports (`sequence`, docs/agent-protocol.md): the portal
applies a report to a host only if its number is above the last it applied there, so a report
that arrives late (a retry whose first attempt got through, a full report that crossed a newer
change) changes nothing.

So the numbers must only grow, across agent restarts too: each is above the last one, which is
kept in the state folder, and at least the clock in microseconds since the epoch. The clock
covers a state folder lost in a reinstall that kept the credential (an agent sends a few reports
a second, far fewer than a million); the file covers a clock set back. A new enrolment is a new
server to the portal, with new hosts: its count starts afresh whatever this one says.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

REPORT_SEQUENCE_FILE = "report-sequence"  # in the state folder


class ReportSequence:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._last = self._read()
        self._write_failed = False

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(self._clock() * 1_000_000))
            self._write(self._last)
            return self._last

    def _read(self) -> int:
        try:
            return int(self._path.read_text())
        except FileNotFoundError:
            return 0
        except (OSError, ValueError) as error:
            logger.warning(
                "%s unreadable (%s); report numbers go on from the clock", self._path, error
            )
            return 0

    def _write(self, value: int) -> None:
        """Atomically, unsynced: a value lost in a crash is below the clock after the reboot."""
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(
                dir=self._path.parent, prefix=f".{self._path.name}."
            )
            try:
                with os.fdopen(descriptor, "w") as file:
                    file.write(str(value))
                os.replace(temporary, self._path)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as error:
            # Reports go on, numbered from the clock; said once, not at every report.
            if not self._write_failed:
                logger.error("report number not kept in %s: %s", self._path, error)
            self._write_failed = True
