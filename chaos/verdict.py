"""The verdict on one chaos trial (SPEC §13): never two, never unknown, the ledger and the rail agree,
the audit chain verifies, and the kill that was aimed actually landed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NEEDS_NOTHING = frozenset({"APPLIED", "BLOCKED", "FAILED_TERMINAL", "CONFIRMED_NOT_APPLIED", "HELD"})


@dataclass
class Observation:
    """What the ledger and the rail's own journal say about one trial's payment, at one moment."""

    intents: list[dict[str, Any]]  # sik, state, rail_entity_id
    stamped: dict[str, list[str]]  # sik -> ids of journal entities carrying that stamp
    chain_bad_seq: int | None
    partition: bool = False
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        states = ",".join(sorted(i["state"] for i in self.intents)) or "no intent"
        entities = sum(len(v) for v in self.stamped.values())
        return f"{states}; {entities} entit{'y' if entities == 1 else 'ies'}"


def judge(obs: Observation) -> list[str]:
    violations = []
    for sik, ids in obs.stamped.items():
        if len(ids) > 1:
            violations.append(f"NEVER_TWO: {len(ids)} rail entities carry stamp {sik}")
    by_sik = {i["sik"]: i for i in obs.intents}
    for intent in obs.intents:
        state, sik = intent["state"], intent["sik"]
        allowed = NEEDS_NOTHING | ({"QUARANTINED"} if obs.partition else set())
        if state not in allowed:
            violations.append(f"NEVER_UNKNOWN: intent {sik} is {state}")
        ids = obs.stamped.get(sik, [])
        if state == "APPLIED":
            if not ids:
                violations.append(f"PHANTOM_SUCCESS: {sik} is APPLIED but no rail entity carries its stamp")
            elif intent.get("rail_entity_id") not in ids:
                violations.append(f"WRONG_ENTITY: {sik} records {intent.get('rail_entity_id')}, the rail has {ids}")
        elif ids and state != "QUARANTINED":
            violations.append(f"SILENT_LOSS: {len(ids)} rail entity carries {sik} but the ledger says {state}")
    for sik in obs.stamped:
        if sik not in by_sik and obs.stamped[sik]:
            violations.append(f"ORPHAN: rail entity with stamp {sik} has no intent in the ledger")
    if obs.chain_bad_seq is not None:
        violations.append(f"AUDIT_CHAIN: broken at seq {obs.chain_bad_seq}")
    return violations


@dataclass
class PauseEvidence:
    """What a rail worker that was SIGSTOPped at its failpoint did once it woke (SIGCONT)."""

    stopped: bool  # it reached the stopped state at its failpoint
    took_over: bool  # a standby took the lease while it was stopped
    exit_code: int | None  # after waking; None: it was still running when we stopped waiting
    born_after_wake: dict[str, list[str]]  # sik -> stamped rail entities created after it woke
    writes_after_wake: list[str]  # intent transitions it made after waking (its fence must refuse all)


def judge_pause(ev: PauseEvidence, obs: Observation) -> list[str]:
    """The pause-specific verdict, on top of judge(): a worker that slept through its lease must be fenced
    — it stops, its writes are refused, and nothing it sends after waking becomes a second entity."""
    violations = []
    if ev.stopped and not ev.took_over:
        violations.append("NO_TAKEOVER: no standby took the lease while the worker was stopped")
    for sik, ids in ev.born_after_wake.items():
        # Which send made which entity the rail cannot say (a standby's retry may land after the wake too);
        # that one stamp is on more than one entity, some created only after the stopped worker woke, is the point.
        if len(obs.stamped.get(sik, [])) > 1:
            violations.append(f"PAID_AFTER_WAKING: {len(obs.stamped[sik])} entities carry stamp {sik}, and "
                              f"{', '.join(ids)} appeared only after the paused worker woke")  # fmt: skip
    for write in ev.writes_after_wake:
        violations.append(f"NOT_FENCED: the paused worker wrote after waking: {write}")
    if ev.stopped and ev.exit_code is None:
        violations.append("NOT_STOPPED: the paused worker was still running after waking without its lease")
    return violations


def judge_burst(obs: Observation, *, calls: int, needed: int, in_flight: int | None) -> list[str]:
    """The burst-specific verdict, on top of judge() after the agents' retries: each distinct call became
    exactly one intent (none lost, none split in two under different stamps — which NEVER_TWO cannot see),
    the rail holds at most one entity per call, and the kill landed with at least *needed* calls in flight
    (*in_flight*: the attempts it left unrecorded; None when it did not land, which the trial reports)."""
    violations = []
    if len(obs.intents) != calls:
        violations.append(f"ONE_INTENT_PER_CALL: {len(obs.intents)} intents for {calls} distinct calls")
    entities = sum(len(ids) for ids in obs.stamped.values())
    if entities > calls:
        violations.append(f"NEVER_TWO: {entities} stamped rail entities for {calls} distinct calls")
    if in_flight is not None and in_flight < needed:
        violations.append(f"IN_FLIGHT_SHORT: the kill left {in_flight} calls in flight; the cell needs {needed}")
    return violations
