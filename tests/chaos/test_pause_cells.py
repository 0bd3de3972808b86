"""The pause cells: which stalls the matrix runs, how they are named and selected, and what the pause
verdict calls a violation (a woken worker that paid, wrote, or kept running)."""

from __future__ import annotations

from chaos.cells import (
    EARLY_TIMINGS,
    PAUSE_FAULTS,
    PAUSE_POINTS,
    PROFILES,
    TOOLS,
    WAKES,
    build_cells,
    build_pause_cells,
    select,
)
from chaos.matrix import summarise_pause
from chaos.trial import TrialResult, entity_stamp, subject_of
from chaos.verdict import Observation, PauseEvidence, judge_pause
from interlock.sik import SETTLEMENT_SUBJECT

SIK = "S" * 32


def evidence(**changes) -> PauseEvidence:  # type: ignore[no-untyped-def]
    base = {"stopped": True, "took_over": True, "exit_code": 3, "born_after_wake": {}, "writes_after_wake": []}
    return PauseEvidence(**{**base, **changes})


def applied(*ids: str) -> Observation:
    return Observation([{"sik": SIK, "state": "APPLIED", "rail_entity_id": ids[0]}], {SIK: list(ids)}, None)


def test_every_pause_point_meets_every_pause_fault_for_every_money_tool_woken_late_and_early() -> None:
    cells = build_pause_cells()
    assert {(c.point, c.fault, c.tool, c.wake) for c in cells} == {
        (p, f, t, w) for p in PAUSE_POINTS for f in PAUSE_FAULTS for t in TOOLS.values() for w in WAKES
    }
    assert len(cells) == 36  # refunds, settlements and payouts
    assert all(c.action == "pause" and c.faults == PROFILES[c.fault] for c in cells)
    assert set(PAUSE_POINTS) == {"rail.after_wal_before_call", "rail.during_call"}
    assert set(PAUSE_FAULTS) == {"ambiguous_504", "slow", "replica_lag"}


def test_early_wakes_run_with_a_rail_timeout_short_enough_for_the_lease_to_run_out_first() -> None:
    from chaos.trial import TIMINGS

    ttl = int(TIMINGS["INTERLOCK_LEASE_TTL_MS"])
    for cell in build_pause_cells():
        timings = {**TIMINGS, **cell.timings}
        if cell.wake == "early":
            assert cell.timings == EARLY_TIMINGS
            # Heartbeats every TTL/3: the lease can expire TTL*2/3 after a commit, before TTL - timeout.
            assert ttl * 2 / 3 < ttl - int(timings["INTERLOCK_RAIL_TIMEOUT_MS"])
        else:
            assert cell.timings == {}, "late wakes run at the kill matrix's timings"


def test_pause_keys_are_distinct_and_kill_keys_are_unchanged() -> None:
    pause = build_pause_cells()
    assert len({c.key for c in pause}) == len(pause)
    assert "pause|rail.after_wal_before_call|ambiguous_504|settlement|late" in {c.key for c in pause}
    kills = build_cells()[0]
    assert all(c.action == "kill" and c.tool == "create_refund" for c in kills)
    assert "rail.during_call|slow" in {c.key for c in kills}, "the kill matrix's keys stay point|fault"
    assert not {c.key for c in pause} & {c.key for c in kills}


def test_select_filters_pause_cells_by_point_fault_tool_and_wake() -> None:
    chosen = select(build_pause_cells(), ["rail.during_call"], ["slow"], [TOOLS["settlement"]], ["early"])
    assert [c.key for c in chosen] == ["pause|rail.during_call|slow|settlement|early"]
    assert len(select(build_pause_cells(), [], [], [TOOLS["refund"]])) == 12
    assert len(select(build_pause_cells(), [], [], [], ["late"])) == 18
    assert select(build_pause_cells(), ["gate.after_resolve"], [], []) == []


def test_settlements_are_counted_by_their_notes_stamp_against_the_balance() -> None:
    settlement = {"kind": "settlement", "payment_id": None,
                  "entity": {"id": "setlod_00000000000001", "notes": {"interlock_sik": SIK}}}  # fmt: skip
    refund = {"kind": "refund", "payment_id": "pay_1", "entity": {"id": "rfnd_1", "payment_id": "pay_1",
                                                                  "notes": [], "receipt": "ilk_" + SIK}}  # fmt: skip
    assert (subject_of(settlement), entity_stamp(settlement["entity"])) == (SETTLEMENT_SUBJECT, SIK)
    assert (subject_of(refund), entity_stamp(refund["entity"])) == ("pay_1", SIK)
    assert entity_stamp({"id": "setlod_2", "notes": []}) is None


def test_a_fenced_worker_that_stopped_and_wrote_nothing_passes() -> None:
    assert judge_pause(evidence(), applied("setlod_1")) == []


def test_a_second_entity_born_after_waking_is_a_violation() -> None:
    found = judge_pause(evidence(born_after_wake={SIK: ["setlod_2"]}), applied("setlod_1", "setlod_2"))
    assert any(v.startswith("PAID_AFTER_WAKING") and "setlod_2" in v for v in found)
    # The woken worker's own send that the rail deduplicated, or the only entity, is not a second payment.
    assert judge_pause(evidence(born_after_wake={SIK: ["setlod_1"]}), applied("setlod_1")) == []


def test_a_woken_worker_that_writes_or_keeps_running_is_not_fenced() -> None:
    wrote = judge_pause(evidence(writes_after_wake=["seq 9 TRANSITION RAIL_APPLIED"]), applied("setlod_1"))
    assert any(v.startswith("NOT_FENCED") for v in wrote)
    running = judge_pause(evidence(exit_code=None), applied("setlod_1"))
    assert any(v.startswith("NOT_STOPPED") for v in running)
    alone = judge_pause(evidence(took_over=False), applied("setlod_1"))
    assert any(v.startswith("NO_TAKEOVER") for v in alone)


def test_the_pause_section_is_its_own_table_labelled_as_real_process_evidence() -> None:
    result = TrialResult("pause|rail.after_wal_before_call|ambiguous_504|settlement|late", 1, 7, True, None,
                         "IN_PROGRESS", "APPLIED; 1 entity", "APPLIED; 1 entity",
                         pause={"lease_left_ms": 2100, "stalled_ms": 5100, "woke_with": "APPLIED#2", "exit_code": 3,
                                "old_attempts": ["#1 FENCED_NOT_SENT"]})  # fmt: skip
    bad = TrialResult("pause|rail.during_call|slow|settlement|early", 1, 8, True, None, "IN_PROGRESS", "", "",
                      violations=["after retry: NEVER_TWO: 2 rail entities carry stamp S"])  # fmt: skip
    report = summarise_pause([result, bad], command="test", seed=7, wall_s=60, commit="abc")
    assert report.startswith("## Chaos: a paused rail worker")
    assert "**real process**" in report
    assert "trials: 2; trials with a violation: 1" in report
    assert ("| late | settlement | rail.after_wal_before_call | ambiguous_504 | 1 | 2100 / 5100 | APPLIED#2 | "
            "#1 FENCED_NOT_SENT | 3 | APPLIED; 1 entity | 0 | 1 / 0 |") in report
    assert "NEVER_TWO" in report
