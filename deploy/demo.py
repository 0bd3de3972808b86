"""`interlock demo`: a real MCP client against a running stack, one table row per check.

It makes its own fresh payments on the sandbox (so it can run again and again against the same
stack) and ends with the line `demo: N passed, M failed`, exiting non-zero if any check failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from deploy.agent_client import SandboxControl, StackInfo, mcp_client, structured
from ledger.db import open_ledger

# The payee deploy/mandate.example.yaml names, and one it does not (an injected vendor).
DEMO_PAYEE, STRANGER = "fa_DEMOVENDOR0001", "fa_INJECTED000001"


@dataclass
class Row:
    check: str
    expected: str
    observed: str
    ok: bool
    needs: str | None = None  # what of the example mandate (deploy/mandate.example.yaml) the row's answer depends on


# What the example mandate grants that some rows check: on another mandate they may fail for that reason alone.
REFUNDS = ("create_refund granted, Rs 500 within its maximum and under its hold threshold (the example: Rs 5,000 and "
           "Rs 3,000)")
PAYOUTS = (f"create_payout granted, {DEMO_PAYEE} on its payees and {STRANGER} on none, refused "
           "(the example's `payees: {fund_account_ids: [fa_DEMOVENDOR0001]}`)")


async def run_demo(info: StackInfo, *, out: Callable[[str], None] = print, settle_timeout_s: float = 60) -> int:
    if info.sandbox_url is None or info.rail_key_id is None or info.rail_key_secret is None:
        out("interlock demo needs the sandbox rail (start with `interlock up --sandbox`)")
        return 1
    rail = SandboxControl(info.sandbox_url, info.rail_key_id, info.rail_key_secret)
    run = f"{int(time.time() * 1000) % 10**10}"
    pay_a, pay_b, pay_c = (f"pay_demo{run}{x}" for x in "ABC")
    for pid in (pay_a, pay_b, pay_c):
        rail.add_payment(pid, 189900)
    rows: list[Row] = []
    siks: list[str] = []

    def row(check: str, expected: str, observed: str, ok: bool, needs: str | None = None) -> None:
        rows.append(Row(check, expected, observed, ok, needs))
        out(f"{'PASS' if ok else 'FAIL'}  {check:<44} expected {expected:<34} observed {observed}")

    out(f"interlock demo against {info.mcp_url} (agent {info.agent_id}); sandbox payments {pay_a}, {pay_b}, {pay_c}")
    async with mcp_client(info.mcp_url, info.token()) as client:
        # 1. A refund is applied once.
        first = structured(await client.call_tool("create_refund", {"payment_id": pay_a, "amount": 50000}))
        sik_a = first.get("sik") or ""
        siks.append(sik_a)
        count = rail.count_stamped(sik_a) if sik_a else 0
        row("refund Rs 500 on a Rs 1,899 payment", "APPLIED, 1 rail entity",
            f"{first.get('state')}, {count} rail entity", first.get("state") == "APPLIED" and count == 1, REFUNDS)

        # 2. The same refund retried five times with fresh request ids: still one.
        states = []
        for _ in range(5):
            again = structured(await client.call_tool("create_refund", {"payment_id": pay_a, "amount": 50000}))
            states.append((again.get("state"), again.get("replayed"), again.get("rail_entity_id")))
        count = rail.count_stamped(sik_a) if sik_a else 0
        same = all(s == ("APPLIED", True, first.get("rail_entity_id")) for s in states)
        row("same refund retried 5x, fresh request ids", "5x APPLIED replayed, 1 entity",
            f"{sum(1 for s in states if s[1])}x replayed, {count} entity", same and count == 1, REFUNDS)

        # 3. An injected over-refund (Rs 48,000 on a Rs 1,899 payment) is blocked.
        injected = structured(await client.call_tool("create_refund", {"payment_id": pay_b, "amount": 4800000}))
        sik_b = injected.get("sik")
        count = rail.count_stamped(sik_b) if sik_b else 0
        row("injected over-refund Rs 48,000", "BLOCKED G2_EXCEEDS_REFUNDABLE",
            f"{injected.get('state')} {injected.get('reason_code')}, {count} entity",
            injected.get("state") == "BLOCKED" and injected.get("reason_code") == "G2_EXCEEDS_REFUNDABLE"
            and count == 0, REFUNDS)  # fmt: skip

        # 4. An ambiguous 504 (the rail applied, then timed out): UNKNOWN now, APPLIED after reconciliation.
        rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
        try:
            unknown = structured(await client.call_tool("create_refund", {"payment_id": pay_c, "amount": 30000}))
        finally:
            rail.set_faults([])
        sik_c = unknown.get("sik") or ""
        siks.append(sik_c)
        row("rail answers 504 after applying", "UNKNOWN, RETRY_SAME_CALL",
            f"{unknown.get('state')}, {unknown.get('caller_action')}",
            unknown.get("state") == "UNKNOWN" and unknown.get("caller_action") == "RETRY_SAME_CALL", REFUNDS)
        settled = await _wait_for_state(client, sik_c, "APPLIED", settle_timeout_s) if sik_c else {}
        count = rail.count_stamped(sik_c) if sik_c else 0
        # With webhooks, settled by the rail's refund.created (ADR 0027), long before the list read's 2 s delay.
        how = _settled_by(Path(info.ledger), sik_c) if sik_c else None
        want = "WEBHOOK_APPLIED" if info.webhook_url else "RECONCILE_FOUND_APPLIED"
        row("...settled by the rail's webhook" if info.webhook_url else "...after the reconciler read the rail",
            f"APPLIED by {want}, 1 entity", f"{settled.get('state')} by {how}, {count} rail entity",
            settled.get("state") == "APPLIED" and how == want and count == 1)

        # 5. After APPLIED: the first refund followed to the bank's final word (answered pending by the sandbox).
        followed = await _wait_for_rail_status(client, sik_a, settle_timeout_s) if sik_a else {}
        rail_status = followed.get("rail_status") or {}
        row("...the first refund at the bank, later", "rail_status processed (final)",
            f"rail_status {rail_status.get('status')} ({'final' if rail_status.get('final') else 'not final'})",
            rail_status.get("status") == "processed" and rail_status.get("final") is True)

        # 6. A payout to the mandate's one payee, repeated: one payout. One to a payee it does not name: blocked.
        rail.add_fund_account(DEMO_PAYEE)
        rail.add_fund_account(STRANGER, contact={"name": "Injected Vendor"})
        rail.set_banking_balance(1_000_000)
        # A genuine new payout each run says why (ADR 0028): the same payee and amount in a day is one payout.
        pay = {"fund_account_id": DEMO_PAYEE, "amount": 48000, "currency": "INR", "mode": "IMPS",
               "purpose": "vendor bill", "interlock_distinct_reason": f"demo run {run}"}  # fmt: skip
        paid = [structured(await client.call_tool("create_payout", pay)) for _ in range(3)]
        sik_p = paid[0].get("sik") or ""
        count = rail.count_stamped(sik_p) if sik_p else 0
        once = [p.get("state") for p in paid] == ["APPLIED"] * 3 and [p.get("replayed") for p in paid] == [
            False, True, True]  # fmt: skip
        row("payout Rs 480 to the listed vendor, 3x", "APPLIED, 2x replayed, 1 payout",
            f"{paid[0].get('state')}, {sum(1 for p in paid if p.get('replayed'))}x replayed, {count} payout",
            once and count == 1, PAYOUTS)
        stranger = structured(await client.call_tool("create_payout", {**pay, "fund_account_id": STRANGER}))
        row("injected payout to an unlisted payee", "BLOCKED G2_PAYEE_NOT_ALLOWED",
            f"{stranger.get('state')} {stranger.get('reason_code')}",
            stranger.get("state") == "BLOCKED" and stranger.get("reason_code") == "G2_PAYEE_NOT_ALLOWED", PAYOUTS)

    # 7. The rail's own journal: exactly the two refunds this run meant to make.
    ours = [e for e in rail.entities() if e["entity"].get("payment_id") in (pay_a, pay_b, pay_c)]
    row("sandbox journal entities for this run", "2", str(len(ours)), len(ours) == 2)
    rail.close()
    passed = sum(r.ok for r in rows)
    needs = sorted({r.needs for r in rows if not r.ok and r.needs})
    if needs:
        out("Some failed rows check what the example mandate (deploy/mandate.example.yaml) grants; under another "
            "mandate they fail for that alone. They need: " + "; ".join(needs))  # fmt: skip
    out(f"demo: {passed} passed, {len(rows) - passed} failed")
    return 0 if passed == len(rows) else 1


def _settled_by(ledger: Path, sik: str) -> str | None:
    """The event of the transition that made *sik* APPLIED, from the ledger's audit chain (read-only)."""
    conn = open_ledger(ledger, readonly=True)
    try:
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq DESC")
        for (payload,) in rows:
            record = json.loads(payload)
            if record.get("sik") == sik and record.get("to") == "APPLIED":
                return str(record.get("event"))
    finally:
        conn.close()
    return None


async def _wait_for_state(client: Any, sik: str, state: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = structured(await client.call_tool("interlock_status", {"sik": sik}))
        if status.get("state") == state or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.25)


async def _wait_for_rail_status(client: Any, sik: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = structured(await client.call_tool("interlock_status", {"sik": sik}))
        if (status.get("rail_status") or {}).get("final") or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.25)


@click.command("demo")
@click.option("--data", type=click.Path(path_type=Path), default=Path("data"), show_default=True,
              help="the data directory `interlock up` is serving")  # fmt: skip
@click.option("--shard", default=None, help="with `interlock up --shards N`: drive that shard's demo agent")
def demo_command(data: Path, shard: str | None) -> None:
    """Drive the running stack with a real MCP client and print one row per check."""
    info = StackInfo.load(data, shard)
    sys.exit(asyncio.run(run_demo(info, out=click.echo)))
