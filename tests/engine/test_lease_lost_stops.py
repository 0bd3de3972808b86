"""A rail worker that wakes without its lease stops (ADR 0005): a real rail-worker process, SIGSTOPped until its lease
ran out and a standby took it, then woken. Regression for NOT_STOPPED in the chaos pause cells: the worker SIGTERMs
itself, the kernel may give that process-directed signal to a thread other than the main one (a main thread just
woken from SIGSTOP that has not run yet is passed over), and the main thread, blocked in RQ's dequeue, never heard."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from deploy.stack import Actor
from interlock.clock import now_ms
from ledger import leases
from ledger.db import open_ledger, transaction
from ledger.leases import RAIL_WORKER_LEASE
from tests.engine.conftest import Engine
from tests.procs import wait_until

# The rail worker as `interlock rail-worker` starts it, except that its main thread blocks SIGTERM: every thread it
# starts inherits that mask, so the kernel can hand a process-directed SIGTERM only to the thread started first —
# what the race does at random, done every time.
ANOTHER_THREAD_TAKES_SIGTERM = """
import signal, sys, threading
threading.Thread(target=threading.Event().wait, name="takes-sigterm", daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
from interlock.cli import main
main()
"""


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _blocked_in_dequeue(engine: Engine) -> bool:
    return any(c.get("cmd") == "blmove" and "b" in c.get("flags", "") for c in engine.redis.client_list())


def test_a_woken_rail_worker_without_its_lease_stops_when_another_thread_takes_its_sigterm(
    engine_factory: Callable[..., Engine],
) -> None:
    engine = engine_factory(start=False)
    stack = engine.stack
    rail = Actor("rail", [sys.executable, "-c", ANOTHER_THREAD_TAKES_SIGTERM, "rail-worker"], stack.base_env(),
                 stack.data_dir / "logs" / "rail.log")  # fmt: skip
    stack.actors["rail"] = rail  # stopped with the stack
    rail.start()
    # Idle in its dequeue, as the paused worker is once its call is out (and RQ's SIGTERM handler is installed).
    wait_until(lambda: _blocked_in_dequeue(engine) or not rail.alive(), timeout=60, what="the rail worker to consume")
    assert rail.alive(), rail.log()[-3000:]

    def lease() -> leases.Lease:
        conn = open_ledger(stack.ledger_path, readonly=True)
        try:
            current = leases.get_lease(conn, RAIL_WORKER_LEASE)
        finally:
            conn.close()
        assert current is not None
        return current

    os.kill(rail.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: _process_state(rail.pid) == "T", timeout=30, what="the rail worker to stop")
        held = lease()
        wait_until(lambda: now_ms() > held.expires_at, timeout=60, what="the stopped worker's lease to run out")
        conn = open_ledger(stack.ledger_path)
        try:
            with transaction(conn):  # a standby takes the lease over, as `rail-worker --wait-lease` does
                leases.acquire(conn, RAIL_WORKER_LEASE, "rail:standby", now=now_ms(), ttl_ms=600_000)
        finally:
            conn.close()
    finally:
        os.kill(rail.pid, signal.SIGCONT)
    assert lease().epoch == held.epoch + 1
    # RQ's dequeue blocks for 405 s: a worker that missed its own SIGTERM is still waiting here.
    try:
        wait_until(lambda: not rail.alive(), timeout=90, what="the woken worker to stop")
    except AssertionError:
        raise AssertionError(f"the woken worker is still running; log:\n{rail.log()[-3000:]}") from None
    assert rail.returncode() == 3, rail.log()[-3000:]
    assert "lease lost: epoch 1 was superseded or expired" in rail.log()
