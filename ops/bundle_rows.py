"""A bundle's rows, re-derived from its audit chain and compared field by field (ADR 0020).

Once the chain verifies, every row of `intents`, `intent_attempts`, `decisions`, `recon_findings` and
`operation_refs` is rebuilt from the records alone and compared with the row the bundle carries, column by
column. A row without its record, a record without its row, a repeated row and a column the chain does not
bind are refused as well: what an auditor reads in a row is then exactly what the chain committed to.

Records from before ADR 0020 carry less (no `set` on a TRANSITION, no ATTEMPT_FINISHED, no params digest on
INTENT_PROPOSED). The fields they leave out are UNBOUND, skipped rather than guessed, until a later record
binds them again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from interlock.canonical import canonical_json, sha256_hex
from ledger import audit
from ledger.intents import SETTABLE

Row = dict[str, Any]


class _Unbound:
    def __repr__(self) -> str:
        return "UNBOUND"


UNBOUND: Any = _Unbound()  # a field no record the chain holds has written: it cannot be checked


@dataclass(frozen=True, slots=True)
class Digest:
    """A text column bound by its sha256, as the record carries it (None: the column is NULL)."""

    sha256: str | None

    def matches(self, value: Any) -> bool:
        if self.sha256 is None:
            return value is None
        return isinstance(value, str) and sha256_hex(value) == self.sha256


# What the rail's answer sets on an attempt row, NULL until its ATTEMPT_FINISHED record: the fields that record
# carries as they are, and the two it binds otherwise (its own ts; a digest of the response).
_ANSWER_FIELDS = ("outcome", "rail_entity_id", "http_status", "fee_minor", "tax_minor", "error_code", "sent_at")
_FINISH_FIELDS = (*_ANSWER_FIELDS, "finished_at", "response_json")


@dataclass
class Chain:
    """What the rows must hold, by the rows' own keys, as the records say."""

    intents: dict[tuple[str, str], Row] = field(default_factory=dict)
    attempts: dict[tuple[str, str, int], Row] = field(default_factory=dict)
    decisions: dict[int, Row] = field(default_factory=dict)  # by the DECISION record's seq: the row's audit_seq
    findings: list[Row] = field(default_factory=list)  # in seq order, which is the rows' id order
    operation_refs: dict[tuple[str, str], Row] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # records that contradict the chain itself


def _proposed(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    key = (p["merchant_id"], p["sik"])
    if key in chain.intents:
        chain.problems.append(f"seq {seq}: a second INTENT_PROPOSED for intent {p['sik']}")
    chain.intents[key] = {
        **dict.fromkeys(SETTABLE),
        "merchant_id": p["merchant_id"], "sik": p["sik"], "tool": p["tool"], "subject_id": p["subject"],
        "amount_minor": p["amount_minor"], "currency": p["currency"], "agent_id": p["agent_id"],
        "mandate_hash": p["mandate_hash"], "operation_ref": p["operation_ref"], "distinct_reason": p["distinct_reason"],
        "mandate_id": p.get("mandate_id", UNBOUND), "params_hash": p.get("params_hash", UNBOUND),
        "params_json": Digest(p["params_sha256"]) if "params_sha256" in p else UNBOUND,
        # A call without a task records none of these: its row holds none.
        "task_id": p.get("task_id"), "task_digest": p.get("task_digest"),
        "task_ceiling_minor": p.get("task_ceiling_minor"), "task_signer": p.get("task_signer"),
        "state": "PROPOSED", "attempt_seq": 0, "reconcile_attempts": 0, "authorized_at": None,
        "first_seen_at": ts, "updated_at": ts,
    }  # fmt: skip


def _transition(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    intent = chain.intents.get((p["merchant_id"], p["sik"]))
    if intent is None:
        chain.problems.append(f"seq {seq}: a TRANSITION of intent {p['sik']}, which the chain never proposed")
        return
    intent.update(state=p["to"], attempt_seq=p["attempt_seq"], updated_at=ts)
    if p["to"] == "AUTHORIZED":
        intent["authorized_at"] = ts
    if p["event"] == "RECONCILE_STARTED":  # begin_reconcile() counts the pass with this event, and only it
        intent["reconcile_attempts"] += 1
    if "set" in p:
        intent.update(p["set"])
    else:  # before ADR 0020 a transition did not say what else it set; only its rail_entity_id
        # (subject_id too is settable only since a payout's reopening could name another account of its payee)
        intent.update(dict.fromkeys(SETTABLE - {"rail_entity_id", "subject_id"}, UNBOUND))
        if "rail_entity_id" in p:
            intent["rail_entity_id"] = p["rail_entity_id"]
    if p["event"] == "ATTEMPT_STARTED":
        _started(chain, ts, p)


def _started(chain: Chain, ts: int, p: dict[str, Any]) -> None:
    leases = p.get("set", {})
    bound = "request_sha256" in p  # an attempt started under ADR 0020: its answer, if any, has its record
    chain.attempts[(p["merchant_id"], p["sik"], p["attempt_seq"])] = {
        "merchant_id": p["merchant_id"], "sik": p["sik"], "attempt_seq": p["attempt_seq"], "started_at": ts,
        "lease_epoch": leases.get("lease_epoch", UNBOUND), "lease_expires_at": leases.get("lease_expires_at", UNBOUND),
        "request_json": Digest(p["request_sha256"]) if bound else UNBOUND,
        **dict.fromkeys(_FINISH_FIELDS, None if bound else UNBOUND),
    }  # fmt: skip


def _finished(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    attempt = chain.attempts.get((p["merchant_id"], p["sik"], p["attempt_seq"]))
    name = f"{p['sik']}#{p['attempt_seq']}"
    if attempt is None:
        chain.problems.append(f"seq {seq}: ATTEMPT_FINISHED for attempt {name}, which the chain never started")
        return
    if attempt["finished_at"] not in (None, UNBOUND):
        chain.problems.append(f"seq {seq}: a second ATTEMPT_FINISHED for attempt {name}")
    attempt.update({field: p[field] for field in _ANSWER_FIELDS}, finished_at=ts,
                   response_json=Digest(p["response_sha256"]))  # fmt: skip


def _decision(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    chain.decisions[seq] = {
        "request_id": p["request_id"], "merchant_id": p["merchant_id"], "sik": p["sik"], "agent_id": p["agent_id"],
        "mandate_hash": p["mandate_hash"], "verdict": p["verdict"], "reason_code": p["reason_code"],
        "results_json": canonical_json(p["results"]).decode("utf-8"), "decided_at": ts, "audit_seq": seq,
        "task_id": p.get("task_id"), "task_digest": p.get("task_digest"), "task_signer": p.get("task_signer"),
    }  # fmt: skip


def _finding(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    chain.findings.append({
        "id": UNBOUND,  # bound by order instead: ids ascend as the records do (_check_findings)
        "merchant_id": p["merchant_id"], "sik": p["sik"], "attempt_seq": p["attempt_seq"], "outcome": p["outcome"],
        "pages_scanned": p["pages_scanned"], "pagination_exhausted": 1 if p["pagination_exhausted"] else 0,
        "matched_entity_id": p["matched_entity_id"], "queried_at": ts,
        "detail_json": canonical_json(p["detail"]).decode("utf-8") if "detail" in p else UNBOUND,
    })  # fmt: skip


def _bound(chain: Chain, seq: int, ts: int, p: dict[str, Any]) -> None:
    chain.operation_refs[(p["merchant_id"], p["operation_ref"])] = {
        "merchant_id": p["merchant_id"], "operation_ref": p["operation_ref"], "sik": p["sik"], "bound_at": ts,
    }  # fmt: skip


_DERIVE: dict[str, Callable[[Chain, int, int, dict[str, Any]], None]] = {
    "INTENT_PROPOSED": _proposed, "TRANSITION": _transition, "ATTEMPT_FINISHED": _finished,
    "DECISION": _decision, "RECON_FINDING": _finding, "OPERATION_REF_BOUND": _bound,
}  # fmt: skip


def derive(records: Iterable[Mapping[str, Any]]) -> Chain:
    """Replay verified *records* into the rows they describe."""
    chain = Chain()
    for record in records:
        kind, seq = str(record["kind"]), int(record["seq"])
        payload = audit.canonical_payload(record["payload_json"])
        if kind not in _DERIVE or payload is None:
            continue  # kinds that cover no row (LEASE_ACQUIRED, FENCED_OUTCOME, ...); payloads verify_records refused
        try:
            _DERIVE[kind](chain, seq, int(record["ts"]), payload)
        except (KeyError, TypeError, ValueError, AttributeError):
            chain.problems.append(f"seq {seq}: the {kind} record lacks a field every {kind} record carries")
    return chain


def check_rows(records: list[dict[str, Any]], tables: Mapping[str, list[Any]]) -> list[str]:
    """Every way the bundle's rows differ from what its (verified) chain says they hold."""
    chain = derive(records)
    problems = list(chain.problems)
    rows = {table: _dicts(table, tables.get(table, []), problems) for table in
            ("intents", "intent_attempts", "decisions", "recon_findings", "operation_refs")}  # fmt: skip
    problems += _check_keyed(
        "intent", "INTENT_PROPOSED", chain.intents, rows["intents"],
        key=lambda r: (r["merchant_id"], r["sik"]), label=lambda r: r["sik"],
    )  # fmt: skip
    problems += _check_keyed(
        "attempt", "ATTEMPT_STARTED", chain.attempts, rows["intent_attempts"],
        key=lambda r: (r["merchant_id"], r["sik"], r["attempt_seq"]), label=lambda r: f"{r['sik']}#{r['attempt_seq']}",
    )  # fmt: skip
    problems += _check_keyed(
        "decision", "DECISION", chain.decisions, rows["decisions"],
        key=lambda r: r["audit_seq"], label=lambda r: r["request_id"],
    )  # fmt: skip
    problems += _check_keyed(
        "operation_ref", "OPERATION_REF_BOUND", chain.operation_refs, rows["operation_refs"],
        key=lambda r: (r["merchant_id"], r["operation_ref"]), label=lambda r: r["operation_ref"],
    )  # fmt: skip
    problems += _check_findings(chain.findings, rows["recon_findings"])
    return problems


def _dicts(table: str, rows: list[Any], problems: list[str]) -> list[Row]:
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            problems.append(f"{table}.jsonl line {n}: not a row object")
    return [row for row in rows if isinstance(row, dict)]


def _check_keyed(what: str, kind: str, expected: Mapping[Any, Row], rows: list[Row], *,
                 key: Callable[[Row], Hashable], label: Callable[[Row], str]) -> list[str]:  # fmt: skip
    problems: list[str] = []
    seen: set[Hashable] = set()
    for row in rows:
        try:
            at, name = key(row), label(row)
            hash(at)
        except (KeyError, TypeError):
            problems.append(f"{what} row without its key fields: {json.dumps(row, sort_keys=True)[:120]}")
            continue
        if at in seen:
            problems.append(f"{what} {name}: more than one row")
            continue
        seen.add(at)
        if at not in expected:
            problems.append(f"{what} {name}: no {kind} record in the chain")
            continue
        problems += [f"{what} {name}: {difference}" for difference in _differences(expected[at], row)]
    for at in expected.keys() - seen:
        problems.append(f"{what} {label(expected[at])}: the chain has its {kind} record, the bundle has no row")
    return problems


def _check_findings(expected: list[Row], rows: list[Row]) -> list[str]:
    """Findings have no key but their id, which the records do not carry: the rows in id order pair with the
    RECON_FINDING records in seq order (one transaction writes both), and the first pair that differs ends it."""
    ids: list[Any] = [row.get("id") for row in rows]
    if not all(type(i) is int for i in ids) or ids != sorted(set(ids)):
        return ["recon_findings.jsonl: the rows' ids are not distinct integers in ascending order"]
    for n, (want, row) in enumerate(zip(expected, rows, strict=False), start=1):
        differences = _differences(want, row)
        if differences:
            where = f"recon finding {n} ({row.get('sik')}#{row.get('attempt_seq')} {row.get('outcome')})"
            return [f"{where}: {d}" for d in differences] + ["the findings after it are not checked"]
    if len(rows) != len(expected):
        return [f"recon_findings.jsonl has {len(rows)} rows, the chain has {len(expected)} RECON_FINDING records"]
    return []


def _differences(want: Row, row: Row) -> list[str]:
    found = [f"{name} is not a field the chain binds" for name in sorted(row.keys() - want.keys())]
    for name, value in want.items():
        if value is UNBOUND:
            continue
        if name not in row:
            found.append(f"{name} is missing from the row")
        elif not _same(value, row[name]):
            found.append(f"row says {name}={_show(row[name])}, the chain says {_show(value)}")
    return found


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, Digest):
        return want.matches(got)
    return type(want) is type(got) and want == got  # 1 is not true, "1" is not 1


def _show(value: Any) -> str:
    if isinstance(value, Digest):
        return "null" if value.sha256 is None else f"text with sha256 {value.sha256[:16]}…"
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 80 else shown[:77] + "…"
