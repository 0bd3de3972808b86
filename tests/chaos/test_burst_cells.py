"""The burst cells: which kills with many calls in flight the family runs, what a burst trial sends, what the
burst verdict calls a violation, how INTERLOCK_KILL_IN_FLIGHT holds a failpoint back until enough calls are
in flight, and the RESULTS.md section."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from chaos.burst import burst_calls, burst_summary, write_trial_mandate
from chaos.cells import (
    BURST_FAULTS,
    BURST_POINTS,
    BURST_PROFILES,
    BURST_TIMINGS,
    PROFILES,
    TOOLS,
    build_burst_cells,
    build_cells,
    build_pause_cells,
    select,
)
from chaos.cli import chaos_command
from chaos.matrix import summarise_burst
from chaos.trial import TrialResult
from chaos.verdict import Observation, judge_burst
from interlock.mandate import load_mandate
from interlock.sik import SETTLEMENT_SUBJECT

ENV = {"PATH": "/usr/bin:/bin"}


def applied(n: int, *, entities_per_call: int = 1) -> Observation:
    intents = [{"sik": f"S{i:031d}", "state": "APPLIED", "rail_entity_id": f"e{i}_0"} for i in range(n)]
    stamped = {i["sik"]: [f"e{k}_{j}" for j in range(entities_per_call)] for k, i in enumerate(intents)}
    return Observation(intents, stamped, None)


def test_every_burst_point_meets_every_burst_fault_for_every_money_tool() -> None:
    cells = build_burst_cells()
    assert {(c.point, c.fault, c.tool) for c in cells} == {
        (p, f, t) for p in BURST_POINTS for f in BURST_FAULTS for t in TOOLS.values()
    }
    assert len(cells) == 18  # refunds, settlements and payouts
    assert set(BURST_POINTS) == {"rail.during_call", "rail.after_call_before_commit"}
    assert set(BURST_FAULTS) == {"none", "ambiguous_504", "slow"}
    assert all(c.action == "burst" and (c.calls, c.kill_in_flight) == (40, 32) for c in cells)
    assert all(c.timings["INTERLOCK_RAIL_CONCURRENCY"] == "64" for c in cells)


def test_burst_keys_are_distinct_and_selectable_and_the_other_families_keep_theirs() -> None:
    cells = build_burst_cells()
    keys = {c.key for c in cells}
    assert len(keys) == len(cells)
    assert "burst|rail.during_call|none|refund" in keys
    assert not keys & {c.key for c in build_cells()[0]} and not keys & {c.key for c in build_pause_cells()}
    chosen = select(cells, ["rail.after_call_before_commit"], ["slow"], [TOOLS["settlement"]])
    assert [c.key for c in chosen] == ["burst|rail.after_call_before_commit|slow|settlement"]


def test_calls_pile_up_at_the_rail_and_none_is_still_answered_inside_the_deadline() -> None:
    deadline = int(BURST_TIMINGS["INTERLOCK_RAIL_TIMEOUT_MS"])
    ttl = int(BURST_TIMINGS["INTERLOCK_LEASE_TTL_MS"])
    assert deadline < ttl, "the call deadline must be shorter than the lease (checked at start)"
    delays = {f: [p["params"]["delay_ms"] for p in BURST_PROFILES[f] if p["name"] == "slow"] for f in BURST_FAULTS}
    # A rail that holds every call longer than a busy stack takes to dispatch 32 (up to 2 s) ...
    assert all(d and min(d) > 2000 and all(p["rate"] == 1.0 for p in BURST_PROFILES[f]) for f, d in delays.items())
    # ... that still answers in time without a fault, and answers too late under "slow".
    assert max(delays["none"]) < deadline and max(delays["ambiguous_504"]) < deadline
    assert min(delays["slow"]) > deadline
    assert PROFILES["ambiguous_504"][0] in BURST_PROFILES["ambiguous_504"]


def test_the_kill_cannot_wait_for_more_calls_than_the_burst_or_the_slots_hold() -> None:
    assert {c.kill_in_flight for c in build_burst_cells(calls=8, in_flight=8)} == {8}
    with pytest.raises(ValueError, match="in flight"):
        build_burst_cells(calls=20, in_flight=32)
    with pytest.raises(ValueError, match="call slots"):
        build_burst_cells(calls=100, in_flight=65)


def test_a_burst_is_distinct_refunds_or_settlements_told_apart_by_their_reason() -> None:
    [refund, settlement] = [select(build_burst_cells(), ["rail.during_call"], ["none"], [t])[0]
                            for t in (TOOLS["refund"], TOOLS["settlement"])]  # fmt: skip
    subjects, calls = burst_calls(refund, 7)
    assert len(set(subjects)) == 40 and [c["payment_id"] for c in calls] == subjects
    subjects, calls = burst_calls(settlement, 7)
    assert subjects == [SETTLEMENT_SUBJECT]
    assert len({c["interlock_distinct_reason"] for c in calls}) == 40 and len({c["amount"] for c in calls}) == 1


def test_the_trial_mandate_has_room_for_the_burst_and_its_retries(tmp_path: Path) -> None:
    path = write_trial_mandate(tmp_path)
    mandate = load_mandate(path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    [window] = raw["limits"]["windows"]
    assert window["max_calls"] >= 3 * 40 and window["max_amount_minor"] >= 3 * 40 * 10_000
    assert mandate.agent_id == "agent_demo"


def test_a_burst_where_every_call_is_one_applied_intent_and_the_kill_had_enough_in_flight_passes() -> None:
    assert judge_burst(applied(40), calls=40, needed=32, in_flight=33) == []
    assert burst_summary(applied(40)) == "APPLIED ×40; 40 entities"


def test_a_lost_or_split_call_a_second_entity_and_a_short_kill_are_violations() -> None:
    assert any(v.startswith("ONE_INTENT_PER_CALL: 39 intents") for v in judge_burst(applied(39), calls=40, needed=32,
                                                                                  in_flight=40))  # fmt: skip
    assert any(v.startswith("ONE_INTENT_PER_CALL: 41 intents") for v in judge_burst(applied(41), calls=40, needed=32,
                                                                                  in_flight=40))  # fmt: skip
    twice = judge_burst(applied(40, entities_per_call=2), calls=40, needed=32, in_flight=40)
    assert any(v.startswith("NEVER_TWO: 80 stamped rail entities") for v in twice)
    short = judge_burst(applied(40), calls=40, needed=32, in_flight=31)
    assert short == ["IN_FLIGHT_SHORT: the kill left 31 calls in flight; the cell needs 32"]


def test_the_burst_section_is_its_own_table_labelled_as_real_process_evidence() -> None:
    good = TrialResult("burst|rail.during_call|none|refund", 1, 7, True, None, "IN_PROGRESS ×40",
                       "APPLIED ×40; 40 entities", "APPLIED ×40; 40 entities", seconds=20.0,
                       burst={"calls": 40, "needed": 32, "said": 32, "unfinished": 33, "rail_pending": 32,
                              "entities_at_kill": 0})  # fmt: skip
    bad = TrialResult("burst|rail.after_call_before_commit|slow|settlement", 1, 8, False, None, "IN_PROGRESS ×40",
                      "", "", violations=["KILL_NOT_LANDED: ..."], burst={"calls": 40, "needed": 32})  # fmt: skip
    report = summarise_burst([good, bad], command="test", seed=7, wall_s=60, commit="abc")
    assert report.startswith("## Chaos: the rail worker killed with many calls in flight")
    assert "**real process**" in report and "at least 32 calls in flight" in report
    assert "trials: 2; trials with a violation: 1; kills landed: 1; calls left in flight by the kill: min 33" in report
    assert ("| refund | rail.during_call | none | 1 | 33 / 32 / 32 | 0 | IN_PROGRESS ×40 | APPLIED ×40; 40 entities | "
            "APPLIED ×40; 40 entities | 0 | 1 | 20.0 |") in report
    assert "KILL_NOT_LANDED" in report


@pytest.mark.parametrize("args, message", [
    (["--burst", "--pause"], "separate families"),
    (["--burst", "--wakes", "early"], "--wakes selects pause cells"),
    (["--burst", "--proxy"], "REST rail only"),
    (["--burst", "--calls", "8"], "in flight"),
    (["--tools", "refund"], "use it with --pause, --burst or"),
])  # fmt: skip
def test_the_command_refuses_burst_options_that_do_not_fit(args: list[str], message: str) -> None:
    result = CliRunner().invoke(chaos_command, args)
    assert result.exit_code == 2 and message in result.output, result.output


def run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    prelude = "from interlock.failpoints import arm, failpoint\n"
    return subprocess.run([sys.executable, "-c", prelude + code], env={**ENV, **env}, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_a_kill_held_for_in_flight_calls_fires_on_the_first_call_that_finds_enough() -> None:
    # Three calls go out, one is answered (2 left, too few), two more go out: the next answer finds 4 (itself too).
    code = ("for step in ['S', 'S', 'S', 'A', 'S', 'S', 'A']:\n"
            "    failpoint('rail.after_wal_before_call' if step == 'S' else 'rail.after_call_before_commit')\n"
            "    print(step, flush=True)\n")  # fmt: skip
    result = run(code, {"INTERLOCK_KILL_AT": "rail.after_call_before_commit", "INTERLOCK_KILL_IN_FLIGHT": "4"})
    assert result.returncode == -9
    assert result.stdout.split() == ["S", "S", "S", "A", "S", "S"]
    assert "failpoint rail.after_call_before_commit: SIGKILL pid" in result.stderr
    assert result.stderr.rstrip().endswith("with 4 calls in flight")


def test_a_during_call_kill_is_armed_only_once_enough_calls_are_out() -> None:
    code = ("import time\n"
            "failpoint('rail.after_wal_before_call')\n"
            "print('armed' if arm('rail.during_call', 5) else 'not armed', flush=True)\n"
            "failpoint('rail.after_wal_before_call')\n"
            "timer = arm('rail.during_call', 5)\n"
            "print('armed' if timer else 'not armed', flush=True)\n"
            "timer.join()\n"
            "time.sleep(5)\n"
            "print('survived')\n")  # fmt: skip
    result = run(code, {"INTERLOCK_KILL_AT": "rail.during_call", "INTERLOCK_KILL_IN_FLIGHT": "2"})
    assert result.returncode == -9
    assert result.stdout.split("\n")[:2] == ["not armed", "armed"] and "survived" not in result.stdout
    assert re.search(r"failpoint rail.during_call: SIGKILL pid \d+ with 2 calls in flight$", result.stderr.rstrip())


def test_without_the_threshold_a_kill_fires_at_once_and_nothing_is_counted() -> None:
    code = "failpoint('rail.after_wal_before_call')\nprint('survived')"
    result = run(code, {"INTERLOCK_KILL_AT": "rail.after_wal_before_call"})
    assert result.returncode == -9 and result.stdout == ""
    assert "calls in flight" not in result.stderr
    counted = run("failpoint('rail.after_wal_before_call')\nfrom interlock.failpoints import in_flight\n"
                  "print(in_flight())", {})  # fmt: skip
    assert counted.stdout.strip() == "0"
