"""Smoke run of both benches as real processes, so the harness cannot rot: three scenarios in every mode
(a benign control, a retry storm, an injection) and a performance run with tiny counts through every
section of the perf bench. Speed is never asserted here; it goes to RESULTS.md only."""

from __future__ import annotations

import re
from pathlib import Path

from bench.metrics import judge
from bench.perf import PerfConfig, run_perf
from bench.perf_report import render as render_perf
from bench.perf_report import summary
from bench.perf_trace import STAMPS
from bench.report import render
from bench.run import run_scenario
from bench.scenario import load_scenarios
from interlock.results import write_section

NUMBER = r"(?:n/a|\d+(?:\.\d+)?|-?\d+\.\d+)"
SUMMARY = (rf"perf: added p50 {NUMBER} ms at 0 ms rail; gated/direct throughput {NUMBER} at 0 ms x8 agents, "
           rf"{NUMBER} at \d+ ms x32 agents; gated/direct-MCP throughput {NUMBER} at 0 ms x8 agents, {NUMBER} at "
           rf"\d+ ms x32 agents; gated/direct-MCP latency p50 {NUMBER} at 0 ms rail; own CPU per call {NUMBER} ms "
           rf"\({NUMBER} x a direct call\); Redis commands per call {NUMBER}; rail worker alone {NUMBER} calls/s at "
           rf"\d+ ms rail "
           rf"\({NUMBER}% of its ceiling at concurrency \d+\); time-to-definite p50 {NUMBER} ms")  # fmt: skip


def test_scenarios_in_both_modes_judged_from_the_journal(tmp_path: Path) -> None:
    scenarios = load_scenarios(only=["E1", "B1", "A2"])
    verdicts = {}
    for scenario in scenarios:
        for run in run_scenario(scenario, tmp_path / "work", seed=7):
            assert run.harness_error is None, run.harness_error
            verdicts[(scenario.id[:2], run.mode)] = judge(run)
    # Gated, with task binding off and required: the benign refund completes, the 504 storm moves money once,
    # the injection is stopped.
    for family in ("E1", "B1", "A2"):
        for mode in ("gated", "task"):
            gated = verdicts[(family, mode)]
            assert not gated.violated and gated.complete and not gated.eo_violation, (family, mode, gated)
    # Direct, the same agent against the same rail: every money call applies then 504s, and it retries.
    assert verdicts[("B1", "direct")].duplicates >= 1
    assert verdicts[("A2", "direct")].violated
    assert verdicts[("E1", "direct")].complete
    results = tmp_path / "RESULTS.md"
    write_section("scenarios", render(list(verdicts.values()), scenarios, seed=7, command="test", plot=None,
                                      elapsed_s=0), results)  # fmt: skip
    text = results.read_text()
    assert "<!-- scenarios:begin -->" in text and "scripted agent" in text
    assert "| gated, task binding off |" in text and "| gated, task binding required |" in text


def test_payout_scenarios_withdrawal_and_the_vendor_s_other_account(tmp_path: Path) -> None:
    """P5: direct, the top-up pays the payout the person withdrew; gated, the reconciler cancelled it first. P6: direct,
    "pay again by UPI" pays the vendor twice; gated, the vendor's UPI id is the same payee and lands on the first."""
    verdicts = {}
    for scenario in load_scenarios(only=["P5", "P6"]):
        for run in run_scenario(scenario, tmp_path / "work", seed=7, modes=("direct", "gated")):
            assert run.harness_error is None and run.settled, (scenario.id, run.mode, run.harness_error)
            verdicts[(scenario.id[:2], run.mode)] = judge(run)
    assert (verdicts[("P5", "direct")].moved, verdicts[("P5", "gated")].moved) == (40_000, 0)
    assert verdicts[("P5", "gated")].entities == 1 and not verdicts[("P5", "gated")].violated
    assert (verdicts[("P6", "direct")].entities, verdicts[("P6", "gated")].entities) == (2, 1)
    assert verdicts[("P6", "direct")].violated and verdicts[("P6", "gated")].complete


def test_perf_measures_every_section_end_to_end(tmp_path: Path) -> None:
    config = PerfConfig(latency_ms=50, calls=3, slow_calls=2, concurrency=(1, 2), gate_workers=(1,), decisions=8,
                        throughput_calls=4, slow_throughput_calls=2, calls_per_agent=1, rail_concurrency=(1, 4),
                        rail_rounds=1, rail_min_calls=2, rails=("sandbox", "double"),
                        definite_faults=("ambiguous_504",), definite_calls=1, redis_calls=3)  # fmt: skip
    report = run_perf(config, tmp_path / "perf", echo=lambda _: None)
    assert {(s.mode, s.rail_ms) for s in report.latency} == {(mode, ms) for mode in ("direct", "direct-mcp", "gated")
                                                              for ms in (0, 50)}  # fmt: skip
    assert all(s.failures == 0 and len(s.latencies_ms) > 0 for s in report.latency)
    assert all(t.applied == t.calls for t in report.throughput), report.throughput
    assert report.decisions[1] > 0 and report.sqlite_commit_ms
    # Every gated call's trace came back whole: from the agent through every process and back.
    for label in ("0 ms rail, 1 agent", "50 ms rail, 1 agent"):
        assert [h.end for h in report.hops[label]] == list(STAMPS[1:]), report.hops[label]
        assert all(h.samples == config.calls if label.startswith("0") else h.samples == config.slow_calls
                   for h in report.hops[label])  # fmt: skip
    # The ambiguous refund was followed to APPLIED.
    [definite] = report.definite
    assert (definite.first_state, definite.final_state) == ("UNKNOWN", "APPLIED") and definite.ms is not None
    # The rail worker alone applied every Decision it was given, on both rails, at both levels.
    assert {(s.rail, s.concurrency) for s in report.rail_alone} == {(r, c) for r in ("sandbox", "double")
                                                                     for c in (1, 4)}  # fmt: skip
    assert all(s.applied == s.calls and s.per_second > 0 for s in report.rail_alone), report.rail_alone
    text = render_perf(report, command="test", plot=None)
    [line] = [line for line in text.splitlines() if line.startswith("perf: ")]
    assert line == summary(report) and re.fullmatch(SUMMARY, line), line
    assert "gated / direct" in text and "decisions/s" in text and "money call round trip" in text
    assert "gated / direct-MCP" in text and "Redis commands per money call, by hop" in text
    assert report.redis is not None and report.redis.per_call > 0
