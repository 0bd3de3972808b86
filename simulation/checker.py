"""The independent checker: judges a finished simulation from what the rail did and what the agents were told.

It imports nothing of Interlock's ledger, actors or SIK code (an import-linter contract holds it to that). Its
evidence: the simulated rail's journal (every entity created, on which terms, with which stamp), the answers
each agent received, the mandates' limits as plain data, and each shard's ledger file read with plain SQL —
the rows as stored, not as Interlock's code would interpret them. The audit chain is re-hashed here from its
definition (SPEC §5: sha256 over prev_hash and the RFC 8785 form of {seq, ts, kind, payload}).

Each process reads a wall clock of its own (simulation.clocks), so a ledger timestamp says what its writer's clock
read, not when. For each audit record the simulator hands over three readings taken as its transaction committed
(`ShardEvidence.written`): the run's true clock, the shared wall clock (true time plus the steps taken by every
clock at once: what a process with no skew of its own reads), and its writer's own clock. A rule about what
happened before what on the rail judges by true time (as the rail's own times, `created_ms` and `sent_mono_ms`,
are true). A rule about Interlock's wall-clock protocol (a lease and when it may be taken over, a limit's
window) is judged on the shared clock: each stamp less its writer's own offset. Every clock stepped at once is
a shift of time no wall-clock rule can see, and the rules were always judged across it (ADR 0023 holds the one
place where it mattered for money on the monotonic clock); one process's clock apart from the others' is what
the rule must survive, and is what this removes. Without skew the shared clock is every stamp, so such seeds
are judged as before. Where the readings are missing (evidence without them, as in the checker's own tests),
the stamps are compared.

Invariants, each a `Violation` with a kind and the evidence:
* ONE_ENTITY_PER_ACTION — at most one rail entity per business action (each simulated action has its own
  signature: tool, subject, amount), and at most one per stamp, across every shard's rail;
* OVER_REFUND — no payment refunded past its captured amount, across every shard's rail;
* LIMIT — no mandate's per-call range, window (calls, amount) or fee budget exceeded by what the rail did;
* NOT_DEFINITE — after faults stop and time runs on, every intent is definite or QUARANTINED, and every
  action's last answer tells its agent what to do for good (liveness);
* LEDGER_RAIL — a ledger APPLIED intent has exactly its entity on the rail, on its terms; a stamped entity on
  the rail is APPLIED in the ledger with that id, or QUARANTINED;
* TOLD_APPLIED — an agent told APPLIED names an entity the rail created with that stamp;
* AUDIT_CHAIN — every shard's chain re-hashes to its head;
* AUDIT_TIME — every writer reads the time only once it holds the ledger's write lock, so a record says when its
  transaction really held it, and a lease or row written in it is measured from then: judged on the true clock,
  the instant a record's writer read its time is never before the record it follows was committed (each process
  reads its own clock, so the stamps themselves may go back and forth between writers; see _audit_chain);
* ABSORBING — the ledger file itself refuses to move an APPLIED or BLOCKED intent to any other state (I4),
  probed with a plain UPDATE in a transaction that is always rolled back;
* ATTRIBUTION — every attempt row that names a rail entity as its answer (APPLIED, TERMS_MISMATCH, or their
  FENCED_ forms) names one the rail created with that intent's stamp: a foreign entity is never taken as ours;
* ABANDONED_EARLY — no IN_FLIGHT attempt is treated as abandoned (LEASE_EXPIRED) before its own row lease plus
  the call's total deadline (ADR 0005: until then its request may still be out), on the true clock: the lease
  runs from when the IN_FLIGHT record was committed, however far the abandoner's clock is from its writer's;
* EVIDENCE_KEPT — every stamped answer the rail delivered to a process that lived on is on an attempt row of its
  intent by the end (issue 25 item 2, ADR 0005: the rail's answer is first-hand evidence, never dropped).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import rfc8785

DEFINITE_STATES = frozenset({"APPLIED", "BLOCKED", "FAILED_TERMINAL", "CONFIRMED_NOT_APPLIED", "QUARANTINED"})
DEFINITE_ACTIONS = frozenset({"DONE", "DO_NOT_RETRY", "ESCALATE_TO_OPERATOR"})
GENESIS = hashlib.sha256(b"interlock-genesis-v1").hexdigest()
RUN_SHORTER_THAN_MS = 86_400_000  # every run is shorter than a day: a day's window counts the run's totals


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class Entry(Protocol):
    kind: str
    id: str
    subject: str
    target: str
    amount: int
    fees: int
    stamp: str | None
    requested_amount: int
    sent_mono_ms: int


class ActionLike(Protocol):
    agent: str
    shard: str
    tool: str
    subject: str
    amount: int


class AnswerLike(Protocol):
    action: Any
    structured: dict[str, Any]
    shard: str  # the shard that answered


@dataclass
class ShardEvidence:
    name: str
    ledger: Path
    journal: list[Any]
    payments: Mapping[str, int]  # payment id → captured amount
    # Every stamped answer the rail gave a money call: (stamp, entity id, caller process, its incarnation).
    deliveries: Sequence[tuple[str, str, str, int]] = field(default_factory=list)
    call_deadline_ms: int | None = None  # the deployment's rail call deadline (RAIL_TIMEOUT_MS), as configured
    # Audit seq -> what the true clock, the shared wall clock and its writer's own wall clock read as it committed.
    written: Mapping[int, tuple[int, int, int]] = field(default_factory=dict)
    grace_ms: int | None = None  # the shard's settlement window grace (ADR 0009), as configured


def check(shards: Iterable[ShardEvidence], actions: Sequence[ActionLike], answers: Sequence[AnswerLike],
          limits: Mapping[str, Mapping[str, Any]], *, settled: bool,
          stopped: frozenset[tuple[str, int]] = frozenset(), set_back_ms: int = 0,
          calls: Mapping[str, tuple[int, int, int]] | None = None) -> list[Violation]:  # fmt: skip
    """Every invariant over the finished run; *settled* when faults stopped and the run was let settle;
    *stopped* the (process, incarnation) pairs the OS killed or saw exit (what they held in memory is gone);
    *set_back_ms* how far, in all, the shared wall clock was stepped back during the run (used only for records the
    simulator gave no write times for); *calls* each money call's request id -> what the true clock, the shared
    wall clock and its ingress's clock read when it was received (ADR 0009's rule past the grace needs them)."""
    found: list[Violation] = []
    by_shard = {s.name: s for s in shards}
    for shard in by_shard.values():
        rows = _intents(shard.ledger)
        found += _ledger_vs_rail(shard, rows, settled=settled)
        found += _audit_chain(shard, set_back_ms)
        found += _absorbing(shard)
        found += _attribution(shard)
        found += _abandoned_early(shard)
        found += _attempts_counted(shard)
        if settled:
            found += _evidence_kept(shard, stopped)
        if settled:
            found += [Violation("NOT_DEFINITE", f"{shard.name} intent {r['sik']} is {r['state']}")
                      for r in rows if r["state"] not in DEFINITE_STATES]  # fmt: skip
    found += _one_entity(by_shard.values(), calls or {}, limits)
    found += _over_refund(by_shard.values())
    found += _limits(by_shard, actions, answers, limits)
    found += _told_applied(by_shard, answers)
    if settled:
        found += _answered(actions, answers)
    return found


# Final statuses in which the money did not reach (or came back from) its payee: each must reach a person.
NOT_PAID = {"refund": ("failed",), "settlement": ("reversed",),
            "payout": ("failed", "reversed", "cancelled", "rejected")}
TOOLS = {"refund": "create_refund", "settlement": "create_instant_settlement", "payout": "create_payout"}
KINDS = {tool: kind for kind, tool in TOOLS.items()}


def _signature(entry: Entry) -> tuple[str, str, int]:
    return entry.kind, entry.subject, entry.requested_amount


def _one_entity(shards: Iterable[ShardEvidence], calls: Mapping[str, tuple[int, int, int]],
                limits: Mapping[str, Mapping[str, Any]]) -> list[Violation]:  # fmt: skip
    """Across every shard's rail: a merchant moved between shards is paid from either, and must be paid once. The
    one exception is ADR 0009's own: a windowed call repeated past its window's grace, after its first call was
    settled, is the next window's operation (`_split_allowed`)."""
    by_name = {shard.name: shard for shard in shards}
    entries = [(shard.name, e) for shard in by_name.values() for e in shard.journal]
    out = []
    for sig, n in Counter(_signature(e) for _, e in entries).items():
        if n > 1:
            mine = sorted(((name, e) for name, e in entries if _signature(e) == sig), key=lambda x: x[1].created_ms)
            if all(name == mine[0][0] and _split_allowed(by_name[name], before, e, calls, limits)
                   for (name, e), (_, before) in zip(mine[1:], mine, strict=False)):  # fmt: skip
                continue
            ids = [f"{name}:{e.id}" for name, e in mine]
            out.append(Violation("ONE_ENTITY_PER_ACTION", f"{n} entities for one action {sig}: {ids}"))
    for stamp, n in Counter(e.stamp for _, e in entries if e.stamp).items():
        if n > 1:
            ids = [f"{name}:{e.id}" for name, e in entries if e.stamp == stamp]
            out.append(Violation("ONE_ENTITY_PER_ACTION", f"{n} entities stamped {stamp}: {ids}"))
    return out


SETTLED_STATES = frozenset({"APPLIED", "BLOCKED", "FAILED_TERMINAL"})  # ADR 0009's "settled" (ledger.states)


def _split_allowed(shard: ShardEvidence, first: Entry, later: Entry, calls: Mapping[str, tuple[int, int, int]],
                   limits: Mapping[str, Mapping[str, Any]]) -> bool:  # fmt: skip
    """Whether ADR 0009 lets *later*'s intent be a new operation beside *first*'s: its call was received past the
    grace after its window's boundary (on its ingress's clock, which keyed its window), in the window after the
    first call's (or later), and — the next window — only once the first call's intent had been admitted and was
    settled (APPLIED, BLOCKED or FAILED_TERMINAL) when it was received; the intent's state is the one its last
    transition before the later intent's admission left, as the admission read it. Received and settled are
    compared on the shared clock (true time plus the steps of every clock at once): a process's own clock, wherever
    it runs within the skew, changes nothing here; every clock stepped back at once between the two is a shift of
    time the rule, on wall clocks, cannot see (docs/simulation.md). The simulated runs are shorter than the default
    grace, so this excuses nothing unless a search configures a short one (run_seed's focus short_grace)."""
    if shard.grace_ms is None or not calls:
        return False
    later_intent, first_intent = _intent_history(shard, later.stamp), _intent_history(shard, first.stamp)
    if later_intent is None or first_intent is None:
        return False
    window = ((limits.get(later_intent["agent"]) or {}).get("idempotency") or {}).get(TOOLS[later.kind], {}).get(
        "window_ms")  # fmt: skip
    received, keyed = calls.get(later_intent["request_id"] or ""), calls.get(first_intent["request_id"] or "")
    if window is None or received is None or keyed is None:
        return False
    _, received_shared, stamp = received
    grace = max(0, min(shard.grace_ms, window // 2))
    if stamp // window > 0 and stamp - stamp // window * window < grace:
        return False  # within the grace: the repeat lands on the first in any state
    apart = stamp // window - keyed[2] // window
    if apart >= 2:
        return True  # another window's operation: no SIK links them
    if apart != 1 or first_intent["admitted"] >= received_shared:
        return False
    state, changed = first_intent["before"](later_intent["admitted_seq"])
    return state in SETTLED_STATES and changed < received_shared


def _intent_history(shard: ShardEvidence, sik: str | None) -> dict[str, Any] | None:
    """An intent's agent, the request that made it, when it was admitted (shared clock, and its audit seq), and a
    function giving its state and the shared time of its last transition before a given audit seq."""
    conn = sqlite3.connect(f"file:{shard.ledger}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT agent_id, merchant_id FROM intents WHERE sik = ?", (sik,)).fetchone()
        proposed = conn.execute("SELECT seq, ts FROM audit_log WHERE kind = 'INTENT_PROPOSED' AND "
                                "json_extract(payload_json, '$.sik') = ? ORDER BY seq LIMIT 1", (sik,)).fetchone()
        # The admission that made it records its decision just before: an earlier one of the same SIK may have
        # landed on another intent (ADR 0009), or been refused.
        made = conn.execute("SELECT request_id FROM decisions WHERE sik = ? AND verdict <> 'BLOCK' AND audit_seq < ? "
                            "ORDER BY audit_seq DESC LIMIT 1", (sik, proposed[0] if proposed else 0)).fetchone()
    finally:
        conn.close()
    if row is None or proposed is None:
        return None
    moves = [(seq, r.shared, r.payload.get("to")) for seq, r in _timed_by_seq(shard) if r.payload.get("sik") == sik]

    def before(seq: int) -> tuple[str, int]:
        done = [(shared, to) for s, shared, to in moves if s < seq]
        return (str(done[-1][1]), done[-1][0]) if done else ("PROPOSED", _shared(shard, proposed[0], proposed[1]))

    return {"agent": row[0], "request_id": made[0] if made else None, "admitted_seq": proposed[0],
            "admitted": _shared(shard, proposed[0], proposed[1]), "before": before}  # fmt: skip


def _shared(shard: ShardEvidence, seq: int, ts: int) -> int:
    """A record's stamp on the shared clock (its stamp less its writer's offset), or its stamp."""
    _, shared, wall = shard.written.get(seq, (ts, ts, ts))
    return int(ts) - (wall - shared)


def _over_refund(shards: Iterable[ShardEvidence]) -> list[Violation]:
    """A payment both shards reach (a moved merchant's) is one payment: its refunds are summed across them."""
    refunded: Counter[str] = Counter()
    captured: dict[str, int] = {}
    for shard in shards:
        captured.update(shard.payments)
        for e in shard.journal:
            if e.kind == "refund":
                refunded[e.subject] += e.amount
    return [Violation("OVER_REFUND", f"{pid}: refunded {total} of {captured.get(pid)}")
            for pid, total in refunded.items() if total > captured.get(pid, 0)]  # fmt: skip


def _limits(shards: Mapping[str, ShardEvidence], actions: Sequence[ActionLike], answers: Sequence[AnswerLike],
            limits: Mapping[str, Mapping[str, Any]]) -> list[Violation]:  # fmt: skip
    """The run is shorter than every window, so each window's limit holds for the run's totals."""
    owner = _owners(actions, answers)
    per_agent: dict[str, list[Entry]] = defaultdict(list)
    out = []
    for shard in shards.values():
        for e in shard.journal:
            action = owner.get((shard.name, *_signature(e)))
            if action is None:
                out.append(Violation("LIMIT", f"{shard.name}: entity {e.id} {_signature(e)} is no agent's action"))
                continue
            per_agent[action.agent].append(e)
    for agent, entries in per_agent.items():
        mandate = limits[agent]
        for e in entries:
            grant = mandate["scope"]["grants"].get(TOOLS[e.kind])
            if grant is None:  # a replaced mandate took the grant away: MANDATE_REPLACED judges what it allowed
                continue
            value = grant["value"]
            # The range binds what Interlock asked for: a rail that applied other terms under our stamp (less, here)
            # did not make the call out of range, and Interlock QUARANTINES that entity (TERMS_MISMATCH). More than
            # asked is judged too, as is what moved in the window totals below.
            if not value["min_amount_minor"] <= e.requested_amount <= value["max_amount_minor"] or (
                    e.amount > value["max_amount_minor"]):  # fmt: skip
                out.append(Violation("LIMIT", f"{agent}: {e.id} of {e.amount} (asked {e.requested_amount}) outside "
                                              "the grant's range"))  # fmt: skip
        for window in mandate["limits"]["windows"]:
            if window["window_ms"] < RUN_SHORTER_THAN_MS:
                continue  # a window shorter than the run slides within it: _short_windows judges it
            if window.get("max_calls") is not None and len(entries) > window["max_calls"]:
                out.append(Violation("LIMIT", f"{agent}: {len(entries)} calls moved money, window allows "
                                              f"{window['max_calls']}"))  # fmt: skip
            total = sum(e.amount for e in entries)
            if window.get("max_amount_minor") is not None and total > window["max_amount_minor"]:
                out.append(Violation("LIMIT", f"{agent}: {total} moved, window allows {window['max_amount_minor']}"))
        budget = mandate["limits"]["fee_budgets"].get("INR")
        # A payout's fee as the rail charged it in the end (none for one queued, cancelled, failed or reversed):
        # Interlock counts each at its flat fee until the rail says, never less.
        fees = sum(e.fees for e in entries if e.kind in ("settlement", "payout"))
        if budget is not None and fees > budget["max_fee_minor"]:
            out.append(Violation("LIMIT", f"{agent}: {fees} of fees charged, budget {budget['max_fee_minor']}"))
    return out


def _owners(actions: Sequence[ActionLike],
            answers: Sequence[AnswerLike]) -> dict[tuple[str, str, str, int], ActionLike]:  # fmt: skip
    """Each action by (shard, signature), for its own shard and every shard an answer to it came from (a moved
    merchant's calls are served by its new shard): money for an action on a shard it never reached is no one's."""
    reached: dict[int, set[str]] = defaultdict(set)
    for answer in answers:
        reached[id(answer.action)].add(answer.shard)
    return {(shard, KINDS[a.tool], a.subject, a.amount): a
            for a in actions for shard in {a.shard} | reached[id(a)]}  # fmt: skip


def _intents(path: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT merchant_id, sik, state, tool, subject_id, amount_minor, rail_entity_id "
                            "FROM intents").fetchall()  # fmt: skip
    finally:
        conn.close()


def _ledger_vs_rail(shard: ShardEvidence, rows: list[sqlite3.Row], *, settled: bool) -> list[Violation]:
    out = []
    by_id = {e.id: e for e in shard.journal}
    by_sik = {r["sik"]: r for r in rows}
    for r in rows:
        if r["state"] != "APPLIED":
            continue
        e = by_id.get(r["rail_entity_id"])
        if e is None:
            out.append(Violation("LEDGER_RAIL", f"{shard.name} {r['sik']} APPLIED as {r['rail_entity_id']}, "
                                                "which the rail never created"))  # fmt: skip
        elif e.stamp != r["sik"] or e.amount != r["amount_minor"] or (e.target or e.subject) != r["subject_id"]:
            out.append(Violation("LEDGER_RAIL", f"{shard.name} {r['sik']} APPLIED as {e.id} on other terms: "
                                                f"{e.subject} {e.amount} stamped {e.stamp}"))  # fmt: skip
    for e in shard.journal:
        found = by_sik.get(e.stamp or "")
        if found is None:
            out.append(Violation("LEDGER_RAIL", f"{shard.name}: {e.id} stamped {e.stamp} has no intent"))
            continue
        r = found
        if settled and not (r["state"] == "APPLIED" and r["rail_entity_id"] == e.id or r["state"] == "QUARANTINED"):
            out.append(Violation("LEDGER_RAIL", f"{shard.name}: {e.id} moved money for {e.stamp}, whose intent is "
                                                f"{r['state']} ({r['rail_entity_id']})"))  # fmt: skip
    return out


def _told_applied(shards: Mapping[str, ShardEvidence], answers: Sequence[AnswerLike]) -> list[Violation]:
    out = []
    journals = {name: {e.id: e for e in shard.journal} for name, shard in shards.items()}
    for a in answers:
        body = a.structured
        if body.get("state") != "APPLIED":
            continue
        e = journals[a.shard].get(body.get("rail_entity_id") or "")
        if e is None or e.stamp != body.get("sik"):
            out.append(Violation("TOLD_APPLIED", f"{a.action.agent} told APPLIED {body.get('rail_entity_id')} for "
                                                 f"{body.get('sik')}: not on the rail with that stamp"))  # fmt: skip
    return out


def _answered(actions: Sequence[ActionLike], answers: Sequence[AnswerLike]) -> list[Violation]:
    last: dict[int, dict[str, Any]] = {}
    for a in answers:
        last[id(a.action)] = a.structured
    out = []
    for action in actions:
        body = last.get(id(action))
        if body is None or body.get("caller_action") not in DEFINITE_ACTIONS:
            out.append(Violation("NOT_DEFINITE", f"{action.agent} {action.tool} {action.subject} {action.amount}: last "
                                                 f"answer {body}"))  # fmt: skip
    return out


def _audit_chain(shard: ShardEvidence, set_back_ms: int = 0) -> list[Violation]:
    conn = sqlite3.connect(f"file:{shard.ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT seq, ts, kind, payload_json, prev_hash, hash FROM audit_log ORDER BY seq"
                            ).fetchall()  # fmt: skip
        head = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    finally:
        conn.close()
    prev, expected, last_ts = GENESIS, 1, None
    # The true commit times of the latest transaction seen, and of the one before it: records of one transaction share
    # their commit time, and a writer may read its time a moment before its own commit, not before another's.
    latest, before = None, None
    went_back: list[Violation] = []
    for seq, ts, kind, payload_json, prev_hash, digest in rows:
        written = shard.written.get(seq)
        if written is not None and not went_back:
            # Its writer's clock read *wall* at the commit, so it read *ts* this long before, on the true clock.
            committed, _, wall = written
            if latest is not None and committed > latest:
                before = latest
            latest = committed
            read_at = committed - (wall - ts)
            if before is not None and read_at < before:
                went_back.append(Violation("AUDIT_TIME", f"{shard.name}: seq {seq} ({kind}) is stamped {ts}: its "
                                                         f"writer read the time {before - read_at} ms before the "
                                                         "record it follows was committed"))  # fmt: skip
        elif not shard.written and last_ts is not None and ts < last_ts - set_back_ms and not went_back:
            went_back.append(Violation("AUDIT_TIME", f"{shard.name}: seq {seq} ({kind}) is stamped {ts}, "
                                                     f"{last_ts - ts} ms before the record it follows"))  # fmt: skip
        last_ts = ts
        payload = json.loads(payload_json)
        # The stored bytes are what is hashed: a payload not in its one canonical spelling (a duplicate key, say,
        # that one reader takes first-wins and another last-wins) breaks the chain here.
        canonical = rfc8785.dumps(payload).decode("utf-8") == payload_json
        body = rfc8785.dumps({"seq": seq, "ts": ts, "kind": kind, "payload": payload})
        mine = hashlib.sha256(prev.encode() + b"\n" + body).hexdigest()
        if seq != expected or prev_hash != prev or mine != digest or not canonical:
            return [Violation("AUDIT_CHAIN", f"{shard.name}: the chain breaks at seq {seq}")]
        prev, expected = digest, expected + 1
    if rows and (head is None or head[0] != rows[-1][0] or head[1] != prev):
        return [Violation("AUDIT_CHAIN", f"{shard.name}: the head {head} is not the last record")]
    return went_back


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _absorbing(shard: ShardEvidence) -> list[Violation]:
    """I4 held by the ledger file itself: each APPLIED or BLOCKED row is offered a move to UNKNOWN with a plain
    UPDATE, inside a transaction that is always rolled back. The file must refuse every one."""
    conn = sqlite3.connect(shard.ledger, isolation_level=None)
    out = []
    try:
        rows = conn.execute("SELECT merchant_id, sik, state FROM intents WHERE state IN ('APPLIED', 'BLOCKED')"
                            ).fetchall()  # fmt: skip
        for merchant_id, sik, state in rows:
            conn.execute("BEGIN IMMEDIATE")
            try:
                moved = conn.execute("UPDATE intents SET state = 'UNKNOWN' WHERE merchant_id = ? AND sik = ?",
                                     (merchant_id, sik)).rowcount  # fmt: skip
            except sqlite3.DatabaseError:
                moved = 0
            finally:
                conn.execute("ROLLBACK")
            if moved:
                out.append(Violation("ABSORBING", f"{shard.name}: the ledger lets {state} intent {sik} be moved"))
                break  # one is proof enough; the rest would say the same
    finally:
        conn.close()
    return out


CLAIMS_AN_ENTITY = ("APPLIED", "FENCED_APPLIED", "TERMS_MISMATCH", "FENCED_TERMS_MISMATCH")


def _attempts(shard: ShardEvidence, sql: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{shard.ledger}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        if "intent_attempts" not in _tables(conn):
            return []
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _attribution(shard: ShardEvidence) -> list[Violation]:
    stamps = {e.id: e.stamp for e in shard.journal}
    rows = _attempts(shard, "SELECT sik, attempt_seq, outcome, rail_entity_id FROM intent_attempts "
                            "WHERE rail_entity_id IS NOT NULL")  # fmt: skip
    return [Violation("ATTRIBUTION", f"{shard.name} {r['sik']} attempt {r['attempt_seq']} recorded {r['outcome']} "
                                     f"{r['rail_entity_id']}, stamped {stamps.get(r['rail_entity_id'])} on the rail")
            for r in rows
            if r["outcome"] in CLAIMS_AN_ENTITY and stamps.get(r["rail_entity_id"]) != r["sik"]]  # fmt: skip


def _transitions(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(ts, payload) of every TRANSITION record of a ledger's audit chain, in chain order."""
    return [(ts, p) for _, ts, p in _records(path)]


def _records(path: Path) -> list[tuple[int, int, dict[str, Any]]]:
    """(seq, ts, payload) of every TRANSITION record of a ledger's audit chain, in chain order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT seq, ts, payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq"
                            ).fetchall()  # fmt: skip
    finally:
        conn.close()
    return [(int(seq), int(ts), json.loads(payload_json)) for seq, ts, payload_json in rows]


@dataclass(frozen=True)
class Timed:
    """A TRANSITION record with its times: *at* its true commit time, *shared* its stamp on the shared clock (the
    stamp less its writer's own offset), *offset* that offset, *ts* the stamp. Without the simulator's readings
    all are the stamp (offset 0)."""

    at: int
    shared: int
    offset: int
    ts: int
    payload: dict[str, Any]


def _timed(shard: ShardEvidence) -> list[Timed]:
    return [r for _, r in _timed_by_seq(shard)]


def _timed_by_seq(shard: ShardEvidence) -> list[tuple[int, Timed]]:
    out = []
    for seq, ts, p in _records(shard.ledger):
        at, shared, wall = shard.written.get(seq, (ts, ts, ts))
        out.append((seq, Timed(at, ts - (wall - shared), wall - shared, ts, p)))
    return out


def _attempts_counted(shard: ShardEvidence) -> list[Violation]:
    """I5: each attempt of an intent is a new attempt_seq — every transition into IN_FLIGHT (the only edge into a
    rail call) names a higher one than the intent's attempts before it, so no two attempts share a row or a fence."""
    out: list[Violation] = []
    highest: dict[tuple[Any, Any], int] = {}
    for _, p in _transitions(shard.ledger):
        if p.get("to") != "IN_FLIGHT":
            continue
        key, seq = (p.get("merchant_id"), p.get("sik")), p.get("attempt_seq")
        if not isinstance(seq, int) or seq <= highest.get(key, 0):
            out.append(Violation("ATTEMPT_SEQ", f"{shard.name} {p.get('sik')} started an attempt numbered {seq} "
                                                f"after attempt {highest.get(key, 0)}"))  # fmt: skip
        if isinstance(seq, int):
            highest[key] = max(highest.get(key, 0), seq)
    return out


def _abandoned_early(shard: ShardEvidence) -> list[Violation]:
    """Judged on the shared clock: the row lease is a reading of its writer's clock and the abandoner (a standby's
    boot, a reconciler) compares its own clock with it, so each is taken less its own clock's offset. A step of
    every clock at once moves both sides alike (the worker's send window is on the same wall clock, and on its
    monotonic one), and is not what this rule is about; one clock ahead of the other is."""
    if shard.call_deadline_ms is None:
        return []
    leases = {(r["sik"], r["attempt_seq"]): r["lease_expires_at"]
              for r in _attempts(shard, "SELECT sik, attempt_seq, lease_expires_at FROM intent_attempts")}  # fmt: skip
    offsets: dict[tuple[Any, Any], int] = {}  # (sik, attempt_seq) -> its IN_FLIGHT writer's clock offset
    out = []
    for r in _timed(shard):
        p = r.payload
        key = (p.get("sik"), p.get("attempt_seq"))
        if p.get("to") == "IN_FLIGHT":
            offsets[key] = r.offset
        if p.get("event") != "LEASE_EXPIRED" or p.get("from") != "IN_FLIGHT":
            continue
        lease = leases.get(key)
        if lease is None:
            continue
        until = lease - offsets.get(key, 0) + shard.call_deadline_ms
        if r.shared < until:
            out.append(Violation("ABANDONED_EARLY", f"{shard.name} {p.get('sik')} attempt {p.get('attempt_seq')} "
                                                    f"abandoned at {r.ts} by its clock, {until - r.shared} ms before "
                                                    "its lease plus the call's deadline (judged on the shared "
                                                    "clock)"))  # fmt: skip
    return out


def _evidence_kept(shard: ShardEvidence, stopped: frozenset[tuple[str, int]]) -> list[Violation]:
    rows = _attempts(shard, "SELECT sik, rail_entity_id FROM intent_attempts WHERE rail_entity_id IS NOT NULL")
    kept = {(r["sik"], r["rail_entity_id"]) for r in rows}
    out = []
    for stamp, entity_id, process, incarnation in shard.deliveries:
        if (process, incarnation) in stopped or (stamp, entity_id) in kept:
            continue
        detail = f"the rail answered {process}#{incarnation} with {entity_id} stamped {stamp}"
        out.append(Violation("EVIDENCE_KEPT", f"{shard.name}: {detail}; no attempt row of {stamp} keeps it"))
    return out


# -- the workload's invariants (simulation.workload: holds, tasks, a replaced mandate, rail accounts) ------------
#
# * HOLD_REJECTED_PAID — no entity carries the stamp of an intent whose hold the operator rejected;
# * TASK_AUDIENCE — no money for a call presented with a task that names another merchant or agent;
# * TASK_CEILING — what moved under one (signer, task_id), across every merchant and shard, is within its ceiling;
# * LIMIT (short windows) — a window shorter than the run: no more than max_calls money-moving intents were
#   authorized within one window's span (each entity's authorization: the last transition of its intent into
#   AUTHORIZED, from the audit chain the checker re-hashes, at or before the rail created it);
# * MANDATE_REPLACED — an entity whose request reached the rail once no rail worker of the shard held the old mandate
#   is within the new one: granted, in range, and within its window counting every entity authorized before it;
# * RAIL_ACCOUNT — money moved only on the rail account its agent's mandate names;
# * PAYEE — a payout only to a payee its agent's grant lists, or one a person approved: the held payout itself, or
#   the payee added to the agent's payees by an earlier approval (ADR 0034);
# * FREE_TEXT — the text a payout carried (its narration and the agent's notes) is within its agent's grant's
#   free_text: no longer than max_chars, the whole of each text matching pattern, a payee's fixed narration only,
#   and no narration to a payee on no list when the grant says `unlisted: none` (ADR 0035);
# * NOTES — the rail never refused a money call for its notes, and no money moved for an action whose own notes do
#   not leave room for the keys Interlock writes (SPEC §10: Razorpay keeps 15 notes, each key and value at most 256
#   characters; Interlock writes NOTES_RESERVED on every call): such a call is refused at the ingress;
# * SHARD_MOVED — once a merchant has moved, the shard it left never admits a call of it (the ledger fence).
# * RESTORE_CONTRADICTED — after a shard's machine was lost and the shard restored from its replica, no agent is told
#   something that contradicts a definite answer it was given before the loss: told APPLIED X, it is told APPLIED X
#   again (not another entity, not a refusal); told the call moved nothing (FAILED_TERMINAL, CONFIRMED_NOT_APPLIED,
#   BLOCKED), it is not told APPLIED. Paying twice across the loss is ONE_ENTITY_PER_ACTION's, and every stamped
#   entity of the lost tail must be in the restored ledger (LEDGER_RAIL, judged on the ledger that ended the run);
# * RESTORE_REFUSED — the restore finished: a restore the protocol refused, or one that never got through, leaves the
#   shard down for a person, which no fault of this simulation should need;
# * FENCED — no money request of the lost machine left after it was fenced (a paused machine that wakes sends
#   nothing): the restore is only as good as its fence.


def check_workload(shards: Iterable[ShardEvidence], actions: Sequence[ActionLike], answers: Sequence[AnswerLike],
                   limits: Mapping[str, Mapping[str, Any]],
                   evidence: Mapping[str, Any]) -> list[Violation]:  # fmt: skip
    found: list[Violation] = []
    by_shard = {s.name: s for s in shards}
    owner = _owners(actions, answers)
    entities: list[tuple[ShardEvidence, Any, Any]] = []  # (shard, journal entry, its action)
    for shard in by_shard.values():
        for e in shard.journal:
            action = owner.get((shard.name, *_signature(e)))
            if action is not None:
                entities.append((shard, e, action))
    authorized = {name: _authorized_at(s) for name, s in by_shard.items()}

    def auth_of(shard: ShardEvidence, e: Any) -> int | None:
        """When, on the shared clock, the entity's intent last entered AUTHORIZED before the rail created it (that
        before judged on the true clock, as the rail's created_ms is true)."""
        times = [(at, shared) for at, shared in authorized[shard.name].get(e.stamp or "", []) if at <= e.created_ms]
        return max(times)[1] if times else None

    rejected = {(r["shard"], r["sik"]) for r in evidence.get("rejected", [])}
    for shard, e, _ in entities:
        if (shard.name, e.stamp) in rejected:
            found.append(Violation("HOLD_REJECTED_PAID", f"{shard.name}: {e.id} moved money for {e.stamp}, whose "
                                                         "hold the operator rejected"))  # fmt: skip
    tasks = evidence.get("tasks", {})
    under_task: Counter[tuple[str, str]] = Counter()
    for shard, e, action in entities:
        task = (getattr(action, "task", None) or {}).get("interlock/task")
        if task is None:
            continue
        audience = task.get("audience") or {}
        if audience.get("merchant_id") != action.merchant or action.agent not in audience.get("agent_ids", []):
            found.append(Violation("TASK_AUDIENCE", f"{shard.name}: {e.id} of {e.amount} for {action.agent} of "
                                                    f"{action.merchant} under task {task['task_id']}, addressed to "
                                                    f"{audience}"))  # fmt: skip
        signer = tasks.get(task["task_id"], {}).get("signer", "?")
        under_task[(signer, task["task_id"])] += e.amount
    for (signer, task_id), total in under_task.items():
        ceiling = tasks.get(task_id, {}).get("ceilings", {}).get("create_refund")
        if ceiling is not None and total > ceiling:
            found.append(Violation("TASK_CEILING", f"task {task_id} of {signer}: {total} moved, ceiling {ceiling}"))
    per_agent: dict[str, list[tuple[ShardEvidence, Any, Any]]] = defaultdict(list)
    for item in entities:
        per_agent[item[2].agent].append(item)
    for agent, items in per_agent.items():
        for window in limits[agent]["limits"]["windows"]:
            if window["window_ms"] >= RUN_SHORTER_THAN_MS or window.get("max_calls") is None:
                continue
            times = sorted(t for t in (auth_of(s, e) for s, e, _ in items) if t is not None)
            for t in times:
                inside = sum(1 for u in times if t - window["window_ms"] < u <= t)
                if inside > window["max_calls"]:
                    found.append(Violation("LIMIT", f"{agent}: {inside} money-moving calls authorized within "
                                                    f"{window['window_ms']} ms up to {t}, window allows "
                                                    f"{window['max_calls']}"))  # fmt: skip
                    break
    for r in evidence.get("replacements", []):
        if r.get("effective_mono_ms") is None:
            continue
        found += _replaced(r, per_agent.get(r["agent"], []), auth_of)
    for restored in evidence.get("restores", []):
        found += _restored(restored, answers)
    for move in evidence.get("moves", []):
        if move.get("applied_mono_ms") is not None and move["source"] in by_shard:
            found += _moved(by_shard[move["source"]], move)
    found += _payouts(by_shard, entities, limits, evidence)
    found += _notes(entities, evidence)
    accounts = evidence.get("accounts", {})
    if accounts:
        for shard, e, action in entities:
            named = (limits[action.agent].get("rail") or {}).get("account_id")
            if named != accounts.get(shard.name):
                found.append(Violation("RAIL_ACCOUNT", f"{shard.name}: {e.id} moved money on "
                                                       f"{accounts.get(shard.name)} for {action.agent}, whose "
                                                       f"mandate names {named}"))  # fmt: skip
    return found


# SPEC §10 and its tools' schemas: Razorpay's limits on notes, and the keys Interlock writes into them.
RAIL_MAX_NOTES, MAX_NOTE_CHARS = 15, 256
NOTES_RESERVED = ("interlock_sik", "interlock_merchant", "interlock_agent")


def _notes(entities: list[tuple[ShardEvidence, Any, Any]], evidence: Mapping[str, Any]) -> list[Violation]:
    out = [Violation("NOTES", f"{shard}: the rail refused a money call stamped {r['stamp']} for its notes "
                              f"({r['notes']} keys, too long: {r['too_long'][:3]})")
           for shard, refusals in evidence.get("notes_refusals", {}).items() for r in refusals]  # fmt: skip
    for shard, e, action in entities:
        own = dict(getattr(action, "notes", None) or {})
        past = [k for k, v in own.items() if k in NOTES_RESERVED or not 0 < len(k) <= MAX_NOTE_CHARS
                or len(v) > MAX_NOTE_CHARS]  # fmt: skip
        if len(own) > RAIL_MAX_NOTES - len(NOTES_RESERVED) or past:
            out.append(Violation("NOTES", f"{shard.name}: {e.id} moved money for {action.agent}'s call with "
                                          f"{len(own)} notes of its own ({[k[:20] for k in past][:3]} past the "
                                          "limits)"))  # fmt: skip
    return out


def _payouts(shards: Mapping[str, ShardEvidence], entities: list[tuple[ShardEvidence, Any, Any]],
             limits: Mapping[str, Mapping[str, Any]], evidence: Mapping[str, Any]) -> list[Violation]:  # fmt: skip
    """RazorpayX payouts (ADR 0028): to a payee the mandate names, queued only when it says so, refused for the
    balance only when payouts queued on the rail took the room, withdrawn with a replaced mandate, and raised to a
    person whenever the money did not reach the payee."""
    out = []
    payees, queueing = evidence.get("payees", {}), evidence.get("queueing", {})
    # A payee on no list is paid only with a person's word (ADR 0034): its held payout approved, or the payee added
    # to the agent's payees by an earlier approval.
    approved = {(r["shard"], r["sik"]) for r in evidence.get("approved", [])}
    added = {name: _payees_added(shard.ledger) for name, shard in shards.items()}
    for shard, e, action in entities:
        if e.kind != "payout":
            continue
        allowed = payees.get(action.agent, {})
        if (e.subject not in allowed.get("contacts", []) and e.target not in allowed.get("fund_accounts", [])
                and (shard.name, e.stamp) not in approved and (action.agent, e.target) not in added[shard.name]):
            out.append(Violation("PAYEE", f"{shard.name}: {e.id} paid {e.target} of {e.subject} for {action.agent}, "
                                          f"whose mandate names {allowed}"))  # fmt: skip
        rule = ((limits[action.agent].get("scope") or {}).get("grants", {}).get(TOOLS["payout"]) or {}).get(
            "free_text")  # fmt: skip
        listed = e.subject in allowed.get("contacts", []) or e.target in allowed.get("fund_accounts", [])
        broken = _free_text_broken(rule, getattr(e, "texts", {}), e.target, e.subject, listed) if rule else None
        if broken is not None:
            out.append(Violation("FREE_TEXT", f"{shard.name}: {e.id} of {action.agent} carried {broken}"))
        if e.queue_if_low_balance and not queueing.get(action.agent, False):
            out.append(Violation("QUEUE_FLAG", f"{shard.name}: {e.id} was sent queue_if_low_balance for "
                                               f"{action.agent}, whose mandate does not queue"))  # fmt: skip
    for name, refusals in evidence.get("payout_refusals", {}).items():
        retried = _retried(shards[name]) if name in shards else None
        for r in refusals:
            if r["queued"] == 0 and not r.get("overtaken_by_queueing") and not (
                    retried is not None and retried(r["stamp"], r.get("at_ms"))):  # fmt: skip
                out.append(Violation("PAYOUT_BALANCE", f"{name}: payout {r['stamp']} of {r['amount']} (with its "
                                                       f"fee {r['cost']}) admitted; the rail had {r['balance']} "
                                                       "and nothing queued"))  # fmt: skip
    replaced = {(r["shard"], r["agent"]): r["effective_mono_ms"] for r in evidence.get("replacements", [])
                if r.get("effective_mono_ms") is not None}  # fmt: skip
    raised = {name: _raised(shard.ledger) for name, shard in shards.items()}
    for shard, e, action in entities:
        effective = replaced.get((shard.name, action.agent))
        # Cancelled, or in a person's hands (an attention, or QUARANTINED: stamped on other terms, say).
        if e.kind == "payout" and effective is not None and e.sent_mono_ms < effective and (
                e.statuses[-1][1] in ("queued", "pending") and e.stamp not in raised[shard.name]):  # fmt: skip
            out.append(Violation("WITHDRAWN", f"{shard.name}: {e.id} of {action.agent} still queued after its "
                                              "mandate was replaced"))  # fmt: skip
    for shard in shards.values():
        for e in shard.journal:
            if e.statuses and e.statuses[-1][1] in NOT_PAID.get(e.kind, ()) and e.stamp not in raised[shard.name]:
                out.append(Violation("RAISED", f"{shard.name}: {e.kind} {e.id} ({e.stamp}) is {e.statuses[-1][1]}, "
                                               "and no person was told"))  # fmt: skip
    return out


def _payees_added(path: Path) -> set[tuple[str, str]]:
    """(agent, fund account) of every payee an approver added to a mandate's payees (ADR 0034)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if "payee_amendments" not in _tables(conn):
            return set()
        return {(str(a), str(f)) for a, f in conn.execute("SELECT agent_id, fund_account_id FROM payee_amendments")}
    finally:
        conn.close()


def _free_text_broken(rule: Mapping[str, Any], texts: Mapping[str, str], fund_account: str, contact: str,
                      listed: bool) -> str | None:  # fmt: skip
    """What of a payout's texts its grant's free_text refuses, or None."""
    for where, text in texts.items():
        if rule.get("max_chars") is not None and len(text) > rule["max_chars"]:
            return f"{where} of {len(text)} characters (at most {rule['max_chars']})"
        if rule.get("pattern") is not None and re.fullmatch(rule["pattern"], text) is None:
            return f"{where} {text!r}, outside the pattern {rule['pattern']!r}"
    narration = texts.get("narration")
    if narration is None:
        return None
    fixed = rule.get("fixed") or {}
    wanted = fixed.get(fund_account) or fixed.get(contact)
    if wanted is not None and narration != wanted:
        return f"the narration {narration!r} to a payee whose only narration is {wanted!r}"
    if wanted is None and not listed and rule.get("unlisted") == "none":
        return f"the narration {narration!r} to a payee on no list"
    return None


def _retried(shard: ShardEvidence) -> Any:
    """(stamp, true ms) -> whether the intent's last entry into AUTHORIZED by then was a retry the reconciler
    authorized. PAYOUT_BALANCE judges the balance re-check of an admission (or a hold's release, which re-reads the
    balance); a retry after a first attempt read absent is re-asserted against G1, G2's range and G3 only (ADR 0028,
    ledger.limits.reassert), and payouts admitted meanwhile — a queueing mandate's above all, which no balance bounds —
    may have taken the room its admission kept. Its refusal by the rail is the rail's own check, not the admission's
    (seeds 3 and 194 with per-process clocks: no clock matter). So such a refusal is not counted here."""
    entries: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for r in _timed(shard):
        if r.payload.get("to") == "AUTHORIZED":
            entries[str(r.payload.get("sik"))].append((r.at, str(r.payload.get("event"))))

    def retried(stamp: str, at_ms: int | None) -> bool:
        before = [event for at, event in entries.get(stamp, []) if at_ms is not None and at <= at_ms]
        return bool(before) and before[-1] == "RETRY_AUTHORIZED"

    return retried


def _raised(path: Path) -> set[str]:
    """The intents whose rail status asks for a person, or that a person already holds (QUARANTINED)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        raised = {sik for (sik,) in conn.execute("SELECT sik FROM intents WHERE state = 'QUARANTINED'")}
        if "rail_status" not in _tables(conn):  # a ledger that follows nothing (the checker's own tests build one)
            return raised
        return raised | {sik for (sik,) in conn.execute("SELECT sik FROM rail_status WHERE attention IS NOT NULL")}
    finally:
        conn.close()


def _replaced(r: Mapping[str, Any], items: list[tuple[ShardEvidence, Any, Any]], auth_of: Any) -> list[Violation]:
    out = []
    mandate = r["mandate"]
    order = sorted((auth_of(s, e) or 0, e.id) for s, e, _ in items)
    for shard, e, _ in items:
        # When its request reached the rail, on the run's true clock: the ledger's wall-clock times may be out of
        # order across a clock stepped back, and a request an old worker sent may be applied later.
        sent = e.sent_mono_ms
        if sent < r["effective_mono_ms"]:
            continue
        grant = mandate["scope"]["grants"].get(TOOLS[e.kind])
        low, high = (grant["value"]["min_amount_minor"], grant["value"]["max_amount_minor"]) if grant else (0, 0)
        if grant is None or not (low <= e.requested_amount <= high and e.amount <= high):  # as LIMIT judges the range
            out.append(
                Violation(
                    "MANDATE_REPLACED",
                    f"{shard.name}: {e.id} {e.kind} of {e.amount} sent at mono {sent}, "
                    f"after {mandate['mandate_id']} replaced the mandate at "
                    f"mono {r['effective_mono_ms']}, which grants {sorted(mandate['scope']['grants'])}",
                )
            )
            continue
        mine = auth_of(shard, e) or 0
        before = [eid for t, eid in order if t <= mine]
        amount = sum(x.amount for s, x, _ in items if x.id in before)
        for window in mandate["limits"]["windows"]:
            if window["window_ms"] < RUN_SHORTER_THAN_MS:
                continue
            if window.get("max_calls") is not None and len(before) > window["max_calls"]:
                out.append(Violation("MANDATE_REPLACED", f"{shard.name}: {e.id} sent at {sent} is call {len(before)} "
                                                         f"of {r['agent']}; {mandate['mandate_id']} allows "
                                                         f"{window['max_calls']}"))  # fmt: skip
            elif window.get("max_amount_minor") is not None and amount > window["max_amount_minor"]:
                out.append(Violation("MANDATE_REPLACED", f"{shard.name}: {e.id} sent at {sent} brings {r['agent']} to "
                                                         f"{amount}; {mandate['mandate_id']} allows "
                                                         f"{window['max_amount_minor']}"))  # fmt: skip
    return out


NOTHING_MOVED = frozenset({"FAILED_TERMINAL", "CONFIRMED_NOT_APPLIED", "BLOCKED"})


def _restored(r: Mapping[str, Any], answers: Sequence[AnswerLike]) -> list[Violation]:
    """The answers given before the loss (the first *answers_before*, from the lost shard) against those after."""
    out = []
    if r.get("refused"):
        out.append(Violation("RESTORE_REFUSED", f"{r['shard']}: {r['refused']}"))
    out += [Violation("FENCED", f"{r['shard']}: the lost machine's {sent}, fenced at mono {r.get('fenced_mono_ms')}")
            for sent in r.get("sent_after_fence", [])]  # fmt: skip
    before = r.get("answers_before")
    if before is None:
        return out
    told: dict[int, Mapping[str, Any]] = {}  # action -> the last definite answer before the loss
    for a in answers[:before]:
        if a.shard == r["shard"] and a.structured.get("caller_action") in DEFINITE_ACTIONS:
            told[id(a.action)] = a.structured
    for a in answers[before:]:
        first, then = told.get(id(a.action)), a.structured
        if first is None or then.get("caller_action") not in DEFINITE_ACTIONS:
            continue
        applied = first.get("state") == "APPLIED"
        if applied and (then.get("state"), then.get("rail_entity_id")) != ("APPLIED", first.get("rail_entity_id")) or (
                first.get("state") in NOTHING_MOVED and then.get("state") == "APPLIED"):  # fmt: skip
            out.append(Violation("RESTORE_CONTRADICTED", f"{a.action.agent} {a.action.tool} {a.action.subject} "
                                                         f"{a.action.amount}: told {first.get('state')} "
                                                         f"{first.get('rail_entity_id')} before {r['shard']} was lost "
                                                         f"at mono {r.get('lost_mono_ms')}, then {then.get('state')} "
                                                         f"{then.get('rail_entity_id')} ({then.get('reason_code')})"))
    return out


def _moved(source: ShardEvidence, move: Mapping[str, Any]) -> list[Violation]:
    """The move was applied only while the source ledger held no intent of the merchant (its re-check runs under
    the write lock): any intent of it there now was admitted after the move."""
    conn = sqlite3.connect(f"file:{source.ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT sik, state FROM intents WHERE merchant_id = ?", (move["merchant"],)).fetchall()
    finally:
        conn.close()
    return [Violation("SHARD_MOVED", f"{source.name}: intent {sik} ({state}) of {move['merchant']}, which moved to "
                                     f"{move['target']} at mono {move['applied_mono_ms']}") for sik, state in rows]


def _authorized_at(shard: ShardEvidence) -> dict[str, list[tuple[int, int]]]:
    """sik -> (true, shared) times of every record of its intent entering AUTHORIZED. The admission, a hold's release
    and a retry's authorization are written by different processes, each on its own clock: a short window's count
    (LIMIT) and the replaced mandate's order (MANDATE_REPLACED) are judged on the shared clock, as the deployment's
    windows are measured on wall clocks."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in _timed(shard):
        if r.payload.get("to") == "AUTHORIZED":
            out[r.payload["sik"]].append((r.at, r.shared))
    return out
