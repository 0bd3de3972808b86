"""Wall-clock milliseconds, the one time unit stored in the ledger and on the queues."""

from __future__ import annotations

import os
import socket
import time
import uuid


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def owner_id(role: str) -> str:
    """A lease owner id unique to this process: role, host, pid and a random suffix."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
