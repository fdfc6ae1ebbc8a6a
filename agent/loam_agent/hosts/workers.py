"""What the agent's thread pools share: the keys in hand, under one lock, and a wait for none."""

import threading
import time


class Workers:
    """Work run in threads, one per key at a time: `_busy` holds the keys in hand, guarded by
    `_lock`, which the subclass also takes for its own state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: set = set()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once no key is in hand, False after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._busy:
                    return True
            time.sleep(0.05)
        return False
