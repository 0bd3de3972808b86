"""`interlock fuzz` at a reduced size against a real stack (issue 17, item 1), and proof that its verdict
turns red: an intent, a rail call, a dead ingress, an unanswered input or a blind control each fail it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from chaos.fuzz import FuzzReport, is_clear, judge, run_fuzz, summarise
from chaos.fuzz_inputs import FAMILIES, FRAMES, HTTP_KINDS, FuzzInput, build_inputs
from chaos.fuzz_wire import Answer, classify_message


def test_a_few_hundred_hostile_inputs_leave_the_ingress_alive_and_nothing_recorded(tmp_path: Path) -> None:
    report = run_fuzz(400, 17, tmp_path / "fuzz")
    assert judge(report) == [], (judge(report), report.per_kind)
    assert (report.crashes, report.intents, report.rail_calls) == (0, 0, 0)
    assert (report.decisions, report.enqueued, report.bad) == (0, 0, [])
    assert report.control == "ok", "a valid refund afterwards was seen: the zeros above can be trusted"
    assert all(report.per_family[f] > 0 for f in FAMILIES), report.per_family
    assert report.per_transport["http"] > 0 and report.per_transport["stdio"] > 0, report.per_transport
    assert report.inputs == sum(report.per_family.values()) == 400
    assert report.probes >= 4 and report.probes_failed == 0
    assert report.line() == "fuzz: 400 inputs, 0 crashes, 0 intents, 0 rail calls"
    section = summarise(report, command="interlock fuzz --inputs 400")
    assert report.line() in section and "verdict: PASS" in section and "| http/chunked_garbage |" in section


def test_the_inputs_cover_every_family_and_kind_on_both_transports() -> None:
    inputs = build_inputs(1000, 3)
    kinds = Counter((x.family, x.kind) for x in inputs)
    assert {k for f, k in kinds if f == "frames"} == set(FRAMES)
    assert {k for f, k in kinds if f == "http"} == set(HTTP_KINDS)
    args = {k for f, k in kinds if f == "args"}
    assert {"dup_amount", "amount_literal", "deep_nesting", "oversized_string", "junk_meta", "nul_surrogate",
            "unknown_field", "unknown_tool"} <= args  # fmt: skip
    assert {x.transport for x in inputs if x.family != "http"} == {"http", "stdio"}
    assert build_inputs(200, 5)[0].body == build_inputs(200, 5)[0].body, "a seed gives the same inputs"


def clean() -> FuzzReport:
    return FuzzReport(inputs=3, per_family=Counter(dict.fromkeys(FAMILIES, 1)), probes=4, control="ok",
                      rss_mib={"http": (80.0, 90.0, 85.0)})  # fmt: skip


def test_the_verdict_passes_a_clean_run() -> None:
    assert judge(clean()) == []


def test_the_verdict_flags_an_intent_a_rail_call_or_a_proposal_from_malformed_input() -> None:
    for name in ("intents", "decisions", "rail_calls", "enqueued"):
        report = clean()
        setattr(report, name, 1)
        assert any(p.startswith("RECORDED") for p in judge(report)), name


def test_the_verdict_flags_a_dead_ingress_a_blind_control_and_a_leak() -> None:
    dead = clean()
    dead.crashes = 1
    assert any(p.startswith("CRASH") for p in judge(dead))
    blind = clean()
    blind.control = "answer success; new intents, rail calls, proposals = (0, 0, 0)"
    assert any(p.startswith("CONTROL") for p in judge(blind))
    leaky = clean()
    leaky.rss_mib = {"stdio": (80.0, 400.0, 400.0)}
    assert any(p.startswith("MEMORY") for p in judge(leaky))
    unseen = clean()
    unseen.per_family = Counter(args=5)
    assert any(p.startswith("COVERAGE") for p in judge(unseen))


def tool_error(code: str, action: str) -> dict[str, object]:
    body = json.dumps({"error": {"code": code, "message": "x"}, "caller_action": action})
    return {"jsonrpc": "2.0", "id": 1, "result": {"isError": True, "content": [{"type": "text", "text": body}]}}


def test_a_money_result_or_silence_is_not_a_clear_error_for_a_malformed_call() -> None:
    call = FuzzInput("args", "dup_amount", "stdio")
    applied = {"jsonrpc": "2.0", "id": 1, "result": {"isError": False, "structuredContent": {"state": "APPLIED"}}}
    assert not is_clear(call, classify_message(applied))
    assert not is_clear(call, Answer("none"))
    internal = tool_error("INTERNAL_ERROR", "RETRY_SAME_CALL")
    assert not is_clear(call, classify_message(internal))
    assert is_clear(call, classify_message(tool_error("INVALID_INPUT", "DO_NOT_RETRY")))
    assert is_clear(call, classify_message({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "x"}}))
