"""Time to definite: how long an agent waits, after an ambiguous answer to a refund, for a definite one.

Per fault profile the sandbox can drive on a money call (rate 1): several agents each make one refund on a
fresh payment, get the ambiguous answer (UNKNOWN), and repeat the same call every POLL_MS — what
RETRY_SAME_CALL tells them to do — until the answer is definite. The time runs from the first ambiguous
answer to the first definite one, so it includes up to one poll interval. The ledger's own clock (UNKNOWN
recorded → definite state recorded) is reported beside it.

* `ambiguous_504` — the rail applies the refund, then answers 504.
* `slow` — the rail applies it after the client gave up (the call's deadline plus SLOW_PAST_DEADLINE_MS).
* `dup_response` — the rail applies it, but answers with an earlier, different refund (no stamp of ours).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.env import TOKEN
from bench.perf_trace import DEFINITE_STATES, Definite
from deploy.agent_client import mcp_client, structured
from ledger.db import open_ledger

if TYPE_CHECKING:
    from bench.perf_rig import PerfRig

FAULTS = ("ambiguous_504", "slow", "dup_response")
POLL_MS = 100
SLOW_PAST_DEADLINE_MS = 1000
GIVE_UP_S = 90.0
REFUND = 10_000


def fault_profile(name: str, rail_timeout_ms: int) -> dict[str, Any]:
    if name == "slow":
        return {"name": "slow", "rate": 1.0, "params": {"delay_ms": rail_timeout_ms + SLOW_PAST_DEADLINE_MS}}
    return {"name": name, "rate": 1.0}


async def _follow(url: str, payment_id: str) -> tuple[str, str | None, float | None, str | None]:
    """(first state, definite state or None, ms from the first ambiguous answer to the definite one, SIK)."""
    args = {"payment_id": payment_id, "amount": REFUND}
    async with mcp_client(url, TOKEN, timeout_s=120) as client:
        first = structured(await client.call_tool("create_refund", args))
        ambiguous_at = time.monotonic()
        state, sik = str(first.get("state")), first.get("sik")
        if state in DEFINITE_STATES:
            return state, state, None, sik
        while time.monotonic() - ambiguous_at < GIVE_UP_S:
            await asyncio.sleep(POLL_MS / 1000)
            again = structured(await client.call_tool("create_refund", args))
            if again.get("state") in DEFINITE_STATES:
                return state, str(again["state"]), (time.monotonic() - ambiguous_at) * 1000, sik
        return state, None, None, sik


def _ledger_ms(rig: PerfRig, siks: list[str]) -> dict[str, float]:
    """SIK → ms from its first UNKNOWN to its first definite state, from the audit chain's timestamps."""
    conn = open_ledger(rig.stack.ledger_path, readonly=True)
    try:
        rows = conn.execute("SELECT ts, payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq").fetchall()
    finally:
        conn.close()
    wanted = set(siks)
    unknown: dict[str, int] = {}
    done: dict[str, int] = {}
    for ts, body in rows:
        payload = json.loads(body)
        sik = payload.get("sik")
        if sik in wanted and payload.get("to") == "UNKNOWN":
            unknown.setdefault(sik, int(ts))
        elif sik in unknown and payload.get("to") in DEFINITE_STATES:
            done.setdefault(sik, int(ts) - unknown[sik])
    return {sik: float(ms) for sik, ms in done.items()}


def measure_definite(rig: PerfRig, faults: tuple[str, ...], calls: int,
                     echo: Callable[[str], None]) -> list[Definite]:  # fmt: skip
    samples: list[Definite] = []
    rig.rail_latency(0)
    for fault in faults:
        mine = follow_round(rig, fault, [fault_profile(fault, rig.rail_timeout_ms())], calls)
        samples += mine
        times = sorted(s.ms for s in mine if s.ms is not None)
        echo(f"time to definite after {fault}: {len(times)}/{len(mine)} ambiguous calls made definite, "
             f"ms {[round(t) for t in times]}")  # fmt: skip
    return samples


def follow_round(rig: PerfRig, label: str, faults: list[dict[str, Any]], calls: int) -> list[Definite]:
    """One round: *calls* agents each refund a fresh payment under *faults* and follow it to a definite answer."""
    payments = rig.payments(calls)
    rig.faults(faults)
    try:
        results = asyncio.run(_gather(rig.url, payments))
    finally:
        rig.faults([])
    ledger = _ledger_ms(rig, [sik for *_, sik in results if sik])
    return [Definite(label, first, final, ms, ledger.get(sik or "")) for first, final, ms, sik in results]


async def _gather(url: str, payments: list[str]) -> list[tuple[str, str | None, float | None, str | None]]:
    return list(await asyncio.gather(*(_follow(url, pid) for pid in payments)))
