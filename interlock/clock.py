"""Wall-clock milliseconds, the one time unit stored in the ledger and on the queues."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
