"""One pause trial: the rail worker is SIGSTOPped (not killed) at its failpoint in the middle of a money
call, as a GC pause, VM steal or I/O stall would stop it; a standby rail worker takes the lease once it
has run out; the reconciler takes the intent over without the stopped worker (and re-authorizes a retry
the standby makes). Then the stopped worker is woken with SIGCONT — late (past TTL + reconcile min delay,
once the intent is definite) or early (the moment the standby's retry has started). It wakes holding a
request it may not have sent yet, or an answer it has not recorded, and a lease that is no longer its
own: it must be fenced — send nothing that becomes a second entity, write nothing, and stop.

The rest is the kill trial's: settle, observe, the agent retries the same call, observe again, and
judge — plus chaos.verdict.judge_pause on what the woken worker did.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.cells import Cell
from chaos.trial import (
    TIMINGS,
    TrialResult,
    _call,
    _go_through_upstream,
    _observe_all,
    _preemption,
    _restart_the_dead,
    _settle_all,
    entity_stamp,
    ledger_rows,
    one_money_call,
    run_trial,
    subject_of,
)
from chaos.verdict import PauseEvidence, judge, judge_pause
from deploy.agent_client import SandboxControl
from deploy.stack import Actor, Stack, StackError, wait_for
from interlock.cli import STACKS_SIGNAL
from interlock.clock import now_ms
from interlock.failpoints import KILL_AT_ENV, PAUSE_AT_ENV
from ledger.leases import RAIL_WORKER_LEASE

PAUSED, STANDBY = "rail", "rail-standby"
# A late wake keeps the worker stopped past its lease TTL plus the reconciler's minimum delay (plus this
# margin), and beyond that until the intent is definite without it. No wake waits longer than HOLD_CAP_S.
MARGIN_MS = 1000
HOLD_CAP_S = 30.0
DEFINITE = frozenset({"APPLIED", "FAILED_TERMINAL", "BLOCKED"})
# What a fenced worker may still write after waking: evidence, never its own outcome (see _writes_after). The
# ATTEMPT_FINISHED record of its fenced answer (ADR 0020) names no actor or owner, so it is never counted either.
EVIDENCE_KINDS = frozenset({"FENCED_OUTCOME"})
EVIDENCE_EVENTS = frozenset({"EARLIER_ATTEMPT_APPLIED"})


def run_pause_trial(cell: Cell, trial: int, seed: int, base: Path, *, mutation: str | None = None,
                    keep: bool = False, proxy: bool = False) -> TrialResult:  # fmt: skip
    return run_trial(cell, trial, seed, base, mutation=mutation, keep=keep, proxy=proxy, body=_run_pause)


def process_state(pid: int) -> str | None:
    """The one-letter state in /proc/<pid>/stat ('T' stopped, 'S' sleeping, 'Z' zombie), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _run_pause(stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *, proxy: bool) -> None:
    stack.start_redis()
    sandbox_url = stack.start_sandbox(seed=seed)
    if proxy:
        _go_through_upstream(stack)
    control = SandboxControl(sandbox_url, stack.env["INTERLOCK_RAIL_KEY_ID"], stack.env["INTERLOCK_RAIL_KEY_SECRET"])
    subject, arguments = one_money_call(control, cell.tool, f"pay_chaos{seed}")
    url = stack.start_ingress(tokens_file=tokens, wait=False)
    # Only the first rail worker pauses: the variable is cleared before anything else starts.
    stack.env[PAUSE_AT_ENV] = cell.point
    try:
        stack.start_engine()
    finally:
        stack.env[PAUSE_AT_ENV] = ""
    stack.wait_for_ingress()
    control.set_faults(cell.faults, seed=seed)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first_call = pool.submit(lambda: asyncio.run(_call(url, arguments, cell.tool)))
        evidence = _pause_takeover_wake(stack, stack.actors[PAUSED], cell, subject, result)
        first = first_call.result()
    result.first_answer = first.get("state") or first.get("error", "?")
    result.kill_landed = evidence.stopped
    if not evidence.stopped:
        result.preempted = _preemption(first)
    leave = frozenset({PAUSED})  # the woken worker is not restarted: the standby is the rail worker now
    _restart_the_dead(stack, tokens, leave=leave)
    result.after_recovery = _judge_moment(stack, control, subject, result, "after recovery")
    for _ in range(6):
        again = asyncio.run(_call(url, arguments, cell.tool))
        if again.get("state") not in (None, "IN_PROGRESS", "UNKNOWN"):
            break
        time.sleep(0.5)
    _restart_the_dead(stack, tokens, leave=leave)
    _settle_all(stack, [subject])
    if evidence.stopped:
        # Looked at last, so that a slow send the woken worker made has had time to land.
        evidence.born_after_wake = _born_after(control, subject, result.pause["woke_ms"])
        evidence.writes_after_wake = _writes_after(stack, result.pause["old_owner"], result.pause["woke_ms"])
        result.pause.update(born_after_wake=sum(len(v) for v in evidence.born_after_wake.values()),
                            writes_after_wake=len(evidence.writes_after_wake))  # fmt: skip
    result.after_retry = _judge_moment(stack, control, subject, result, "after retry", evidence)
    if not evidence.stopped and result.preempted is None:
        result.violations.append(f"PAUSE_NOT_LANDED: {cell.point} was reachable and the worker did not stop there")
    control.close()


def _pause_takeover_wake(stack: Stack, paused: Actor, cell: Cell, subject: str,
                         result: TrialResult) -> PauseEvidence:  # fmt: skip
    evidence = PauseEvidence(stopped=False, took_over=False, exit_code=None, born_after_wake={}, writes_after_wake=[])
    try:
        wait_for(lambda: process_state(paused.pid) == "T", timeout=20, what=f"the pause at {cell.point}", actor=paused)
    except StackError:
        return evidence  # it never stopped (the gates may have blocked the call): nothing to wake
    stopped_at = time.monotonic()
    evidence.stopped = f"failpoint {cell.point}: SIGSTOP" in paused.log()
    old = _rail_lease(stack) or {"owner": "?", "epoch": 0, "expires_at": 0}
    [stalled] = ledger_rows(stack, "SELECT attempt_seq, started_at FROM intent_attempts WHERE lease_epoch = ? "
                       "ORDER BY attempt_seq DESC LIMIT 1", (old["epoch"],)) or [{"attempt_seq": 0, "started_at": 0}]
    # A standby, as a supervisor would keep one: it takes over once the stopped worker's heartbeat is stale.
    standby = stack.actor(STANDBY, ["rail-worker", "--wait-lease", "60"], {KILL_AT_ENV: "", PAUSE_AT_ENV: ""})
    standby.start()
    try:
        wait_for(lambda: (_rail_lease(stack) or {"epoch": 0})["epoch"] > old["epoch"], timeout=20,
                 what="the standby to take the lease", actor=standby)  # fmt: skip
        evidence.took_over = True
    except StackError as exc:
        result.violations.append(f"HARNESS: {exc}"[:300])
    if cell.wake == "early":
        # The moment the standby's retry has started (it may still be in flight), or the intent is definite.
        def ready() -> bool:
            return any(i["attempt_seq"] > stalled["attempt_seq"] for i in _subject_intents(stack, subject)) or \
                _definite(stack, subject)
    else:
        timings = {**TIMINGS, **cell.timings}
        hold_ms = int(timings["INTERLOCK_LEASE_TTL_MS"]) + int(timings["INTERLOCK_RECONCILE_MIN_DELAY_MS"]) + MARGIN_MS

        def ready() -> bool:
            return time.monotonic() >= stopped_at + hold_ms / 1000 and _definite(stack, subject)

    while evidence.took_over and time.monotonic() < stopped_at + HOLD_CAP_S and not ready():
        time.sleep(0.02)
    woke_with = ",".join(f"{i['state']}#{i['attempt_seq']}" for i in _subject_intents(stack, subject)) or "no intent"
    woke_ms = now_ms()
    held_s = time.monotonic() - stopped_at
    os.kill(paused.pid, signal.SIGCONT)
    assert paused.process is not None
    stacks: dict[str, Any] | None = None
    try:
        # Fenced: the heartbeat finds the lease gone and the worker shuts itself down.
        evidence.exit_code = paused.process.wait(20)
    except subprocess.TimeoutExpired:
        evidence.exit_code = None
        stacks = _stacks_of(paused)  # what it is doing instead, kept before it is judged
    result.pause = {
        "held_s": round(held_s, 1), "epochs": f"{old['epoch']}->{(_rail_lease(stack) or {'epoch': 0})['epoch']}",
        # Both from the stalled attempt's commit: when the worker's own lease ran out, and when it was woken.
        "lease_left_ms": old["expires_at"] - stalled["started_at"], "stalled_ms": woke_ms - stalled["started_at"],
        "woke_with": woke_with, "woke_ms": woke_ms, "old_owner": old["owner"], "exit_code": evidence.exit_code,
        "old_attempts": _attempt_outcomes(stack, old["epoch"]),
    }  # fmt: skip
    if stacks is not None:
        result.pause.update(stacks)
    return evidence


def _stacks_of(actor: Actor) -> dict[str, Any]:
    """Every thread's stack of a running *actor*, as it writes them to its log on STACKS_SIGNAL (interlock.cli), and
    its exit code if it exits soon after: the signal interrupts the main thread's blocking call, so a worker that
    exits then had a stop request waiting for its main thread (a SIGTERM another thread took)."""
    before = len(actor.log())
    try:
        os.kill(actor.pid, STACKS_SIGNAL)
    except ProcessLookupError:
        return {"stacks": "(gone before its stacks were asked for)"}
    try:
        wait_for(lambda: "most recent call first" in actor.log()[before:], timeout=10, what="its stacks", actor=actor)
        time.sleep(0.5)  # written by the signal handler in one go, thread after thread: let the last one land
    except StackError:
        pass
    assert actor.process is not None
    try:
        exit_after = actor.process.wait(5)
    except subprocess.TimeoutExpired:
        exit_after = None
    return {"stacks": actor.log()[before:][-20_000:] or "(no stacks written)", "exit_after_stacks": exit_after}


def _judge_moment(stack: Stack, control: SandboxControl, subject: str, result: TrialResult, moment: str,
                  evidence: PauseEvidence | None = None) -> str:  # fmt: skip
    _settle_all(stack, [subject])  # returns at once when already settled
    obs = _observe_all(stack, control, [subject])
    found = judge(obs) + (judge_pause(evidence, obs) if evidence is not None else [])
    result.violations += [f"{moment}: {v}" for v in found]
    return obs.summary()


def _definite(stack: Stack, subject: str) -> bool:
    states = [i["state"] for i in _subject_intents(stack, subject)]
    return bool(states) and all(s in DEFINITE for s in states)


def _born_after(control: SandboxControl, subject: str, woke_ms: int) -> dict[str, list[str]]:
    born: dict[str, list[str]] = {}
    for record in control.entities():
        sik = entity_stamp(record["entity"])
        if sik and subject_of(record) == subject and record["created_ms"] >= woke_ms:
            born.setdefault(sik, []).append(record["id"])
    return born


def _rail_lease(stack: Stack) -> dict[str, Any] | None:
    rows = ledger_rows(stack, "SELECT owner, epoch, expires_at FROM leases WHERE name = ?", (RAIL_WORKER_LEASE,))
    return rows[0] if rows else None


def _subject_intents(stack: Stack, subject: str) -> list[dict[str, Any]]:
    sql = "SELECT sik, state, attempt_seq FROM intents WHERE subject_id = ? ORDER BY sik"
    return ledger_rows(stack, sql, (subject,))


def _writes_after(stack: Stack, owner: str, woke_ms: int) -> list[str]:
    """Audit records the woken worker made after it woke, other than keeping what the rail told it: the
    FENCED_OUTCOME on its own attempt row, and (ADR 0005) settling the intent APPLIED from a stamped answer
    (EARLIER_ATTEMPT_APPLIED) — whether that entity is right, the ledger ⇔ rail verdict judges."""
    writes = []
    sql = "SELECT seq, kind, payload_json FROM audit_log WHERE ts >= ? ORDER BY seq"
    for row in ledger_rows(stack, sql, (woke_ms,)):
        payload = json.loads(row["payload_json"])
        if owner in (payload.get("actor"), payload.get("owner")) and row["kind"] not in EVIDENCE_KINDS and \
                payload.get("event") not in EVIDENCE_EVENTS:
            writes.append(f"seq {row['seq']} {row['kind']} {payload.get('event', '')}".strip())
    return writes


def _attempt_outcomes(stack: Stack, epoch: int) -> list[str]:
    sql = "SELECT attempt_seq, outcome FROM intent_attempts WHERE lease_epoch = ? ORDER BY attempt_seq"
    rows = ledger_rows(stack, sql, (epoch,))
    return [f"#{r['attempt_seq']} {r['outcome']}" for r in rows]
