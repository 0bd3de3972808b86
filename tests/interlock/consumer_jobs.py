"""RQ job functions for test_consumer.py (RQ imports a job's function by its dotted path)."""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_running = 0
peak = 0


def hold(seconds: float) -> str:
    """Sleep like a job waiting on a rail read; records how many ran at once in this process."""
    global _running, peak
    with _lock:
        _running += 1
        peak = max(peak, _running)
    try:
        time.sleep(seconds)
    finally:
        with _lock:
            _running -= 1
    return "held"


def refuse(reason: str) -> None:
    raise ValueError(reason)
