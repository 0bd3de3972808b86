"""Every field of every row in an audit bundle is bound to its chain (ADR 0020; issue 25 item 10).

Regression: `audit verify --bundle` said "bundle ok" — under the very head hash an auditor compares out of band —
after an intent's amount, subject or agent was edited, an APPLIED intent's row deleted, an attempt's request or a
decision's agent changed, or a duplicate key put in a record's payload_json. Each tampering below is applied alone
to a fresh export of one realistic ledger, with the (unsigned) manifest digests recomputed as a forger would, and
each must be refused, naming the row and the field.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.canonical import sha256_hex
from interlock.verdicts import allow
from ledger import audit, intents, leases, operator
from ledger.db import transaction
from ledger.states import Event
from ops.bundle import TABLE_FILES, export_bundle, verify_bundle

M = "acc_M"
T0 = 1_700_000_000_000
Rows = list[dict[str, Any]]


def _sik(name: str) -> str:
    return name.upper().ljust(32, "0")


APPLIED, REFUSED, RECONCILED, RETRIED, REJECTED, RESOLVED, QUARANTINED, IN_FLIGHT = (
    _sik(n) for n in ("applied", "refused", "reconciled", "retried", "rejected", "resolved", "quarantined", "inflight"))


def _propose(conn: sqlite3.Connection, sik: str, amount: int, now: int, *, verdict: str = "ALLOW",
             event: Event = Event.GATES_PASSED, task_id: str | None = None) -> None:  # fmt: skip
    """A decided call and its intent; under a signed task (SPEC §10) when *task_id* is given."""
    task = {} if task_id is None else {"task_id": task_id, "task_digest": f"td_{task_id}", "task_signer": "ticketing"}
    intents.record_decision(conn, request_id=f"req_{sik[:8]}", merchant_id=M, sik=sik, agent_id="agent_a",
                            mandate_hash="h" * 64, verdict=verdict, reason_code=f"{verdict}_OK",
                            results=[{"gate": "G1", "verdict": verdict}], now=now, **task)  # fmt: skip
    intents.insert_intent(conn, merchant_id=M, sik=sik, tool="create_refund", subject_id=f"pay_{sik[:8]}",
                          amount_minor=amount, currency="INR", params={"amount": amount, "speed": "normal"},
                          params_hash=f"ph_{sik[:8]}", agent_id="agent_a", mandate_id="mnd_1", mandate_hash="h" * 64,
                          operation_ref=None, distinct_reason=None, now=now,
                          task_ceiling_minor=None if task_id is None else 500_000, **task)  # fmt: skip
    fields = {"hold_expires_at": now + 60_000, "reason_code": "G4_HOLD"} if event is Event.GATES_HELD else None
    intents.transition(conn, M, sik, event, now=now, set_fields=fields)


def _send(conn: sqlite3.Connection, sik: str, attempt_seq: int, now: int, *, outcome: str, event: Event,
          entity: str | None = None) -> None:  # fmt: skip
    with transaction(conn):
        intents.start_attempt(conn, M, sik, now=now, lease_owner="rail-1", lease_epoch=attempt_seq,
                              lease_expires_at=now + 30_000, request={"amount": 1, "attempt": attempt_seq})
    with transaction(conn):
        intents.finish_attempt(conn, M, sik, attempt_seq, now=now + 5, outcome=outcome, rail_entity_id=entity,
                               http_status=200 if entity else 504, fee_minor=2 if entity else None,
                               response={"id": entity} if entity else None, sent_at=now + 1)  # fmt: skip
        applied = {"rail_entity_id": entity} if entity else {}
        intents.transition(conn, M, sik, event, now=now + 5, actor="rail-1", expect_attempt_seq=attempt_seq,
                           set_fields={"reason_code": None if entity else "RAIL_TIMEOUT", **applied})


def _reconcile(conn: sqlite3.Connection, sik: str, attempt_seq: int, now: int, *, outcome: str, event: Event,
               entity: str | None = None) -> None:  # fmt: skip
    with transaction(conn):
        intents.begin_reconcile(conn, M, sik, now=now, owner="recon-1", lease_expires_at=now + 10_000)
        intents.record_finding(conn, merchant_id=M, sik=sik, attempt_seq=attempt_seq, outcome=outcome,
                               pages_scanned=2, pagination_exhausted=outcome != "INCONCLUSIVE",
                               matched_entity_id=entity, now=now + 1, detail={"pages": [1, 2]})  # fmt: skip
        intents.transition(conn, M, sik, event, now=now + 1, actor="recon-1",
                           set_fields={"rail_entity_id": entity, "lease_owner": None} if entity else None)


def realistic_ledger(conn: sqlite3.Connection) -> None:
    """Decisions and a refusal, attempts that went ambiguous and were reconciled, a retry, an operator's findings,
    an operation_ref binding, a rejected hold, quarantined intents and an attempt still in flight."""
    t = T0
    with transaction(conn):
        leases.acquire(conn, "rail-worker", "rail-1", now=t, ttl_ms=30_000)  # a record that covers no row
        _propose(conn, APPLIED, 189_900, t, task_id="task_1")
        intents.bind_operation_ref(conn, M, "order-77", APPLIED, now=t)
        intents.record_decision(conn, request_id="req_refused", merchant_id=M, sik=REFUSED, agent_id="agent_b",
                                mandate_hash="h" * 64, verdict="BLOCK", reason_code="G2_OVER_REFUNDABLE",
                                results=[{"gate": "G2", "verdict": "BLOCK"}], now=t)  # a refusal: no intent
        for sik in (RECONCILED, RETRIED, RESOLVED, QUARANTINED, IN_FLIGHT):
            _propose(conn, sik, 50_000, t)
        _propose(conn, REJECTED, 400_000, t, verdict="HOLD", event=Event.GATES_HELD)
    _send(conn, APPLIED, 1, t + 10, outcome="APPLIED", event=Event.RAIL_APPLIED, entity="rfnd_applied")
    _send(conn, RECONCILED, 1, t + 20, outcome="UNKNOWN", event=Event.RAIL_AMBIGUOUS)
    _reconcile(conn, RECONCILED, 1, t + 30, outcome="INCONCLUSIVE", event=Event.RECONCILE_INCONCLUSIVE)
    _reconcile(conn, RECONCILED, 1, t + 40, outcome="APPLIED", event=Event.RECONCILE_FOUND_APPLIED,
               entity="rfnd_reconciled")
    _send(conn, RETRIED, 1, t + 50, outcome="UNKNOWN", event=Event.RAIL_AMBIGUOUS)
    _reconcile(conn, RETRIED, 1, t + 60, outcome="CONFIRMED_NOT_APPLIED", event=Event.RECONCILE_CONFIRMED_ABSENT)
    with transaction(conn):
        intents.transition(conn, M, RETRIED, Event.RETRY_AUTHORIZED, now=t + 70, actor="recon-1",
                           reasserted=allow("REASSERTED"))
    _send(conn, RETRIED, 2, t + 80, outcome="APPLIED", event=Event.RAIL_APPLIED, entity="rfnd_retried")
    for sik in (RESOLVED, QUARANTINED):
        _send(conn, sik, 1, t + 90, outcome="UNKNOWN", event=Event.RAIL_AMBIGUOUS)
        with transaction(conn):
            intents.transition(conn, M, sik, Event.QUARANTINE, now=t + 100, actor="recon-1",
                               set_fields={"reason_code": "RECON_BUDGET_SPENT"})
    with transaction(conn):
        operator.resolve_quarantine(conn, intents.require_intent(conn, M, RESOLVED), operator="ops@example.com",
                                    evidence="statement line 7: no refund", applied=False, rail_entity_id=None,
                                    pages_scanned=4, pagination_exhausted=True, now=t + 110,
                                    credential="sha256:ab12")  # fmt: skip
        operator.reject_hold(conn, intents.require_intent(conn, M, REJECTED), actor="ops@example.com",
                             reason="not this customer", now=t + 120)
        intents.start_attempt(conn, M, IN_FLIGHT, now=t + 130, lease_owner="rail-1", lease_epoch=1,
                              lease_expires_at=t + 30_130, request={"amount": 50_000})


@pytest.fixture
def exported(ledger: sqlite3.Connection, tmp_path: Path) -> Callable[[], tuple[Path, dict[str, Any]]]:
    realistic_ledger(ledger)
    counter = iter(range(1000))

    def export() -> tuple[Path, dict[str, Any]]:
        out = tmp_path / f"bundle{next(counter)}"
        return out, export_bundle(ledger, out)

    return export


def load(bundle: Path, table: str) -> Rows:
    return [json.loads(line) for line in (bundle / TABLE_FILES[table]).read_text().splitlines() if line]


def rewrite(bundle: Path, table: str, rows: Rows) -> None:
    """Replace a table's rows and recompute its digest in the manifest, as anyone can: the manifest is unsigned."""
    name = TABLE_FILES[table]
    blob = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows).encode()
    (bundle / name).write_bytes(blob)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": sha256_hex(blob), "rows": len(rows)}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def row(rows: Rows, **match: Any) -> dict[str, Any]:
    return next(r for r in rows if all(r.get(k) == v for k, v in match.items()))


def test_an_untouched_bundle_of_a_realistic_ledger_verifies(exported: Any, ledger: sqlite3.Connection) -> None:
    bundle, manifest = exported()
    report = verify_bundle(bundle)
    assert report.ok, report.problems
    assert report.head == manifest["head"]
    kinds = {r["kind"] for r in load(bundle, "audit_log")}
    assert {"DECISION", "INTENT_PROPOSED", "TRANSITION", "ATTEMPT_FINISHED", "RECON_FINDING", "OPERATION_REF_BOUND",
            "LEASE_ACQUIRED"} <= kinds  # fmt: skip
    states = {r["sik"]: r["state"] for r in load(bundle, "intents")}
    assert states == {APPLIED: "APPLIED", RECONCILED: "APPLIED", RETRIED: "APPLIED", REJECTED: "BLOCKED",
                      RESOLVED: "CONFIRMED_NOT_APPLIED", QUARANTINED: "QUARANTINED", IN_FLIGHT: "IN_FLIGHT"}


def test_every_column_of_every_covered_table_is_bound_by_the_chain(exported: Any, ledger: sqlite3.Connection) -> None:
    # A column the chain does not bind is one an auditor reads and nothing checks: a new column must come with its
    # binding (ops/bundle_rows.py), or this fails for it.
    unbound = []
    for table in operator.SNAPSHOT_TABLES:
        for column in [info[1] for info in ledger.execute(f"PRAGMA table_info({table})")]:
            bundle, _ = exported()
            rows = load(bundle, table)
            rows[-1][column] = "tampered"  # no column of these rows ever holds this value
            rewrite(bundle, table, rows)
            if verify_bundle(bundle).ok:
                unbound.append(f"{table}.{column}")
    assert unbound == []


def _edit(table: str, match: dict[str, Any], **changes: Any) -> Callable[[Path], None]:
    def tamper(bundle: Path) -> None:
        rows = load(bundle, table)
        row(rows, **match).update(changes)
        rewrite(bundle, table, rows)
    return tamper


def _delete(table: str, **match: Any) -> Callable[[Path], None]:
    def tamper(bundle: Path) -> None:
        rows = load(bundle, table)
        rows.remove(row(rows, **match))
        rewrite(bundle, table, rows)
    return tamper


def _duplicate(table: str, match: dict[str, Any], **changes: Any) -> Callable[[Path], None]:
    def tamper(bundle: Path) -> None:
        rows = load(bundle, table)
        rows.append({**row(rows, **match), **changes})
        rewrite(bundle, table, rows)
    return tamper


def _duplicate_key_in_payload(bundle: Path) -> None:
    records = load(bundle, "audit_log")
    proposal = next(r for r in records if r["kind"] == "INTENT_PROPOSED" and APPLIED in r["payload_json"])
    proposal["payload_json"] = '{"amount_minor":100,' + proposal["payload_json"][1:]  # a first-wins reader sees 100
    rewrite(bundle, "audit_log", records)


A = {"sik": APPLIED}
TAMPERINGS: dict[str, tuple[Callable[[Path], None], str]] = {
    # intents: what the INTENT_PROPOSED record says
    "intent amount": (_edit("intents", A, amount_minor=100), f"intent {APPLIED}: row says amount_minor=100"),
    "intent subject": (_edit("intents", A, subject_id="pay_OTHER"), "row says subject_id=\"pay_OTHER\""),
    "intent agent": (_edit("intents", A, agent_id="agent_b"), "row says agent_id=\"agent_b\""),
    "intent tool": (_edit("intents", A, tool="create_settlement"), "row says tool=\"create_settlement\""),
    "intent currency": (_edit("intents", A, currency="USD"), "row says currency=\"USD\""),
    "intent mandate_hash": (_edit("intents", A, mandate_hash="0" * 64), "row says mandate_hash="),
    "intent mandate_id": (_edit("intents", A, mandate_id="mnd_other"), "row says mandate_id=\"mnd_other\""),
    "intent params_hash": (_edit("intents", A, params_hash="ph_other"), "row says params_hash=\"ph_other\""),
    "intent params_json": (_edit("intents", A, params_json='{"amount":100}'), "row says params_json="),
    "intent task_signer": (_edit("intents", A, task_signer="someone"), "row says task_signer=\"someone\""),
    "intent task_ceiling": (_edit("intents", A, task_ceiling_minor=10**9), "row says task_ceiling_minor="),
    "intent first_seen_at": (_edit("intents", A, first_seen_at=T0 - 1), "row says first_seen_at="),
    # intents: what the TRANSITION records (and their "set") say
    "intent rail_entity_id": (_edit("intents", {"sik": RETRIED}, rail_entity_id="rfnd_applied"),
                              f"intent {RETRIED}: row says rail_entity_id=\"rfnd_applied\""),
    "intent reason_code": (_edit("intents", {"sik": QUARANTINED}, reason_code=None), "row says reason_code=null"),
    "intent lease_owner": (_edit("intents", {"sik": IN_FLIGHT}, lease_owner="rail-2"), "row says lease_owner="),
    "intent hold_expires_at": (_edit("intents", {"sik": REJECTED}, hold_expires_at=None), "hold_expires_at=null"),
    "intent attempt_seq": (_edit("intents", {"sik": RETRIED}, attempt_seq=1), "row says attempt_seq=1"),
    "intent reconcile_attempts": (_edit("intents", {"sik": RECONCILED}, reconcile_attempts=0),
                                  "row says reconcile_attempts=0"),
    "intent authorized_at": (_edit("intents", {"sik": RETRIED}, authorized_at=T0), "row says authorized_at="),
    "intent updated_at": (_edit("intents", A, updated_at=T0), "row says updated_at="),
    "intent row deleted": (_delete("intents", sik=APPLIED),
                           f"intent {APPLIED}: the chain has its INTENT_PROPOSED record, the bundle has no row"),
    "intent row repeated": (_duplicate("intents", A, amount_minor=100), f"intent {APPLIED}: more than one row"),
    "intent unbound column": (_edit("intents", A, note="refunded by phone"),
                              "note is not a field the chain binds"),
    # attempts: ATTEMPT_STARTED and ATTEMPT_FINISHED
    "attempt request_json": (_edit("intent_attempts", A, request_json='{"amount":100}'),
                             f"attempt {APPLIED}#1: row says request_json="),
    "attempt outcome": (_edit("intent_attempts", {"sik": RECONCILED}, outcome="REJECTED"),
                        "row says outcome=\"REJECTED\""),
    "attempt rail_entity_id": (_edit("intent_attempts", A, rail_entity_id="rfnd_other"),
                               "row says rail_entity_id=\"rfnd_other\""),
    "attempt response_json": (_edit("intent_attempts", A, response_json='{"id": "rfnd_other"}'),
                              "row says response_json="),
    "attempt answer on an open attempt": (_edit("intent_attempts", {"sik": IN_FLIGHT}, outcome="APPLIED"),
                                          f"attempt {IN_FLIGHT}#1: row says outcome=\"APPLIED\", the chain says null"),
    "attempt http_status": (_edit("intent_attempts", A, http_status=500), "row says http_status=500"),
    "attempt fee": (_edit("intent_attempts", A, fee_minor=0), "row says fee_minor=0"),
    "attempt lease_epoch": (_edit("intent_attempts", A, lease_epoch=9), "row says lease_epoch=9"),
    "attempt sent_at": (_edit("intent_attempts", A, sent_at=None), "row says sent_at=null"),
    "attempt row deleted": (_delete("intent_attempts", sik=RETRIED, attempt_seq=1),
                            f"attempt {RETRIED}#1: the chain has its ATTEMPT_STARTED record, the bundle has no row"),
    # decisions: the DECISION record
    "decision agent": (_edit("decisions", {"request_id": "req_refused"}, agent_id="agent_a"),
                       "decision req_refused: row says agent_id=\"agent_a\""),
    "decision reason": (_edit("decisions", {"request_id": "req_refused"}, reason_code="OK"),
                        "row says reason_code=\"OK\""),
    "decision results": (_edit("decisions", {"request_id": "req_refused"}, results_json="[]"),
                         "row says results_json=\"[]\""),
    "decision mandate_hash": (_edit("decisions", {"request_id": "req_refused"}, mandate_hash="0" * 64),
                              "row says mandate_hash="),
    "decision task_signer": (_edit("decisions", {"sik": APPLIED}, task_signer=None), "row says task_signer=null"),
    "decision decided_at": (_edit("decisions", {"request_id": "req_refused"}, decided_at=T0 + 1),
                            "row says decided_at="),
    "decision row deleted": (_delete("decisions", request_id="req_refused"),
                             "decision req_refused: the chain has its DECISION record, the bundle has no row"),
    # findings and operation_refs
    "finding operator evidence": (_edit("recon_findings", {"sik": RESOLVED}, detail_json='{"by":"someone else"}'),
                                  "row says detail_json="),
    "finding pages": (_edit("recon_findings", {"sik": RESOLVED}, pages_scanned=40), "row says pages_scanned=40"),
    "finding deleted": (_delete("recon_findings", sik=RETRIED),
                        f"recon finding 3 ({RESOLVED}#1 CONFIRMED_NOT_APPLIED)"),  # the next row, misaligned
    "last finding deleted": (_delete("recon_findings", sik=RESOLVED),
                             "recon_findings.jsonl has 3 rows, the chain has 4 RECON_FINDING records"),
    "operation_ref bound_at": (_edit("operation_refs", {"operation_ref": "order-77"}, bound_at=T0 + 5),
                               "operation_ref order-77: row says bound_at="),
    "operation_ref deleted": (_delete("operation_refs", operation_ref="order-77"),
                              "operation_ref order-77: the chain has its OPERATION_REF_BOUND record"),
    # the chain itself
    "duplicate key in a payload": (_duplicate_key_in_payload, "payload_json is not the canonical JSON"),
}


@pytest.mark.parametrize("name", TAMPERINGS)
def test_a_tampered_row_is_refused_under_the_same_head(exported: Any, name: str) -> None:
    tamper, expected = TAMPERINGS[name]
    bundle, manifest = exported()
    tamper(bundle)
    report = verify_bundle(bundle)
    assert report.head == manifest["head"]  # the forgery keeps the head hash an auditor compares
    assert not report.ok, f"{name}: the tampered bundle verified"
    assert any(expected in problem for problem in report.problems), report.problems


def test_a_bundle_written_before_the_rows_were_bound_still_verifies(exported: Any) -> None:
    # What a ledger written before ADR 0020 holds: no "set", request digest, params digest, mandate_id or detail
    # on its records, and no ATTEMPT_FINISHED (for this ledger, the very chain main's code wrote: same head hash).
    # Its rows are checked on what those records did carry.
    bundle, _ = exported()
    _as_before_adr_0020(bundle)
    assert verify_bundle(bundle).ok, verify_bundle(bundle).problems
    _edit("intents", A, amount_minor=100)(bundle)
    assert "row says amount_minor=100" in " ".join(verify_bundle(bundle).problems)


def _as_before_adr_0020(bundle: Path) -> None:
    added = {"INTENT_PROPOSED": ("mandate_id", "params_hash", "params_sha256"), "TRANSITION": ("set", "request_sha256"),
             "RECON_FINDING": ("detail",)}  # fmt: skip
    prev, records, renumbered = audit.GENESIS_HASH, [], {}
    for record in load(bundle, "audit_log"):
        if record["kind"] == "ATTEMPT_FINISHED":
            continue
        payload = json.loads(record["payload_json"])
        for name in added.get(record["kind"], ()):
            payload.pop(name, None)
        seq = renumbered[record["seq"]] = len(records) + 1
        digest = audit.record_hash(prev, seq, record["ts"], record["kind"], payload)
        records.append({**record, "seq": seq, "prev_hash": prev, "hash": digest,
                        "payload_json": json.dumps(payload, sort_keys=True, separators=(",", ":"))})  # fmt: skip
        prev = digest
    rewrite(bundle, "audit_log", records)
    decisions = load(bundle, "decisions")
    for decision in decisions:
        decision["audit_seq"] = renumbered[decision["audit_seq"]]
    rewrite(bundle, "decisions", decisions)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["head"] = {"seq": len(records), "hash": prev}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
