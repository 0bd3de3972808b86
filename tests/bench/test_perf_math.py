"""The performance bench's arithmetic and its rail double, as pure units (no processes)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from bench.perf_cpu import BENCH, CpuMeter, cpu_seconds
from bench.perf_rail import RailAloneSample, calls_for
from bench.perf_report import _bottleneck
from bench.perf_trace import Definite, breakdown, definite_stats, hops, summary_line, total_ms
from bench.rail_double import RailDouble
from tests.procs import wait_until

FULL = {"agent_sent": 0, "ingress_received": 1000, "enqueued": 1500, "gate_dequeued": 4000, "rail_read_done": 6000,
        "decision_enqueued": 6500, "admitted": 10_000, "request_sent": 11_000, "answer_received": 13_000,
        "recorded": 14_000, "ingress_answered": 15_000, "agent_got": 17_000}  # fmt: skip


def test_hops_are_consecutive_stamps_in_call_order_whatever_the_dict_order() -> None:
    shuffled = dict(reversed(list(FULL.items())))
    steps = hops(shuffled)
    assert [(a, b) for a, b, _ in steps][:2] == [("agent_sent", "ingress_received"), ("ingress_received", "enqueued")]
    assert [ms for *_, ms in steps] == [1.0, 0.5, 2.5, 2.0, 0.5, 3.5, 1.0, 2.0, 1.0, 1.0, 2.0]
    assert sum(ms for *_, ms in steps) == total_ms(FULL) == 17.0


def test_a_missing_stamp_merges_its_two_hops_so_the_whole_still_adds_up() -> None:
    partial = {k: v for k, v in FULL.items() if k != "request_sent"}
    steps = {(a, b): ms for a, b, ms in hops(partial)}
    assert steps[("admitted", "answer_received")] == 3.0
    assert ("admitted", "request_sent") not in steps
    [merged] = [h for h in breakdown([partial]) if h.start == "admitted"]
    assert merged.label == "admitted → answer_received"
    assert total_ms({"enqueued": 5}) is None


def test_breakdown_gives_median_and_p99_per_hop_over_calls() -> None:
    slower = {**FULL, "answer_received": FULL["answer_received"] + 100_000}
    stats = {h.end: h for h in breakdown([FULL, FULL, slower])}
    money = stats["answer_received"]
    assert (money.samples, money.p50_ms, money.p99_ms) == (3, 2.0, 102.0)
    assert money.label == "the money call on the rail (round trip)"
    assert list(stats)[0] == "ingress_received" and list(stats)[-1] == "agent_got"


def test_definite_stats_count_only_ambiguous_calls_and_report_what_they_ended_as() -> None:
    samples = [Definite("ambiguous_504", "UNKNOWN", "APPLIED", 2100.0, 2000.0),
               Definite("ambiguous_504", "UNKNOWN", "APPLIED", 2300.0, 2200.0),
               Definite("ambiguous_504", "APPLIED", "APPLIED", None),  # the fault did not make it ambiguous
               Definite("slow", "UNKNOWN", None, None)]  # never definite before the bench gave up
    first, slow = definite_stats(samples)
    assert (first.fault, first.calls, first.ambiguous, first.definite) == ("ambiguous_504", 3, 2, 2)
    assert (first.p50_ms, first.p99_ms, first.ledger_p50_ms) == (2100.0, 2300.0, 2000.0)
    assert first.final_states == {"APPLIED": 3}
    assert (slow.ambiguous, slow.definite, slow.final_states) == (1, 0, {"not definite": 1})


def test_the_summary_line_has_the_issue_s_exact_shape() -> None:
    line = summary_line(added_p50_ms=7.04, ratio_0ms_x8=0.5, ratio_slow_x32=0.812, rail_alone_per_s=301.4, slow_ms=200,
                        definite_p50_ms=2080.4, mcp_ratio_0ms_x8=0.61, mcp_ratio_slow_x32=0.47,
                        mcp_latency_ratio_0ms=1.84, own_cpu_ms=4.5, own_cpu_ratio=3.6, redis_per_call=17.0,
                        rail_alone_ceiling_pct=81.2)  # fmt: skip
    assert line == ("perf: added p50 7.0 ms at 0 ms rail; gated/direct throughput 0.50 at 0 ms x8 agents, 0.81 at "
                    "200 ms x32 agents; gated/direct-MCP throughput 0.61 at 0 ms x8 agents, 0.47 at 200 ms x32 agents; "
                    "gated/direct-MCP latency p50 1.84 at 0 ms rail; own CPU per call 4.50 ms (3.6 x a direct call); "
                    "Redis commands per call 17.0; rail worker alone 301 calls/s at 200 ms rail (81% of its ceiling "
                    "at concurrency 256); time-to-definite p50 2080 ms")  # fmt: skip
    missing = summary_line(added_p50_ms=None, ratio_0ms_x8=None, ratio_slow_x32=None, rail_alone_per_s=None,
                           slow_ms=200, definite_p50_ms=None)  # fmt: skip
    assert missing.count("n/a") == 12 and "\n" not in missing


def test_rail_alone_sizes_and_the_sandbox_bottleneck_verdict() -> None:
    assert calls_for(1, 4, 10) == 10 and calls_for(64, 4, 10) == 256
    slow_sandbox = [RailAloneSample("sandbox", 256, 512, 512, 5.0), RailAloneSample("double", 256, 512, 512, 2.0)]
    verdict = _bottleneck(slow_sandbox, 200)
    assert "the sandbox is the bottleneck" in verdict
    assert "256.0 calls/s at concurrency 256, is 20% of the 1280 calls/s" in verdict
    assert "is the rail worker itself" in verdict
    even = [RailAloneSample("sandbox", 64, 256, 256, 1.0), RailAloneSample("double", 64, 256, 256, 0.95)]
    verdict = _bottleneck(even, 200)
    assert "the sandbox is not the bottleneck" in verdict and "is the concurrency setting" in verdict
    assert RailAloneSample("double", 1, 10, 0, 0.0).per_second == 0.0
    assert "CPUs busy" not in verdict and RailAloneSample("double", 1, 10, 0, 0.0, cpu_s=1.0).cpu_ms_per_call is None


def test_the_rail_worker_s_own_cpu_names_what_limits_it() -> None:
    busy = RailAloneSample("double", 256, 1000, 1000, 4.0, cpu_s=3.8)
    assert busy.cpu_ms_per_call == 3.8 and busy.cores == 0.95
    verdict = _bottleneck([RailAloneSample("sandbox", 256, 1000, 1000, 4.2, cpu_s=3.9), busy], 200)
    assert "It kept 0.95 CPUs busy doing it, 3.80 ms of CPU a call" in verdict
    assert "1024 calls/s would need 0.98 ms a call at one CPU" in verdict


def test_the_rail_double_answers_a_repeated_key_with_the_original_refund_and_lists_newest_first() -> None:
    double = RailDouble(latency_ms=0)

    def call(method: str, target: str, body: dict[str, object] | None = None, key: str | None = None) -> object:
        headers = {"x-refund-idempotency": key} if key else {}
        status, payload = asyncio.run(double.answer(method, target, headers, json.dumps(body or {}).encode()))
        assert status == 200
        return payload

    body = {"amount": 500, "notes": {"interlock_sik": "s1"}, "receipt": "ilk_s1"}
    first = call("POST", "/v1/payments/pay_1/refund", body, key="k1")
    again = call("POST", "/v1/payments/pay_1/refund", body, key="k1")
    other = call("POST", "/v1/payments/pay_1/refund", {"amount": 700}, key="k2")
    assert first == again and first != other
    page = call("GET", "/v1/payments/pay_1/refunds?count=1&skip=0")
    assert isinstance(page, dict) and [r["id"] for r in page["items"]] == [other["id"]]  # type: ignore[index]
    assert asyncio.run(double.answer("DELETE", "/v1/anything", {}, b""))[0] == 400


def _python(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def _started(code: str) -> subprocess.Popen[bytes]:
    """A child past its interpreter start-up: that CPU is spent before the meter starts, on a busy machine too."""
    proc = subprocess.Popen([sys.executable, "-c", f"print('ready', flush=True)\n{code}"],
                            stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"


def test_cpu_per_call_is_charged_to_the_process_that_spent_it() -> None:
    busy, sleeper = _started(SPIN.format(s=20)), _started("import time; time.sleep(20)")
    try:
        meter = CpuMeter(lambda: {"busy": busy.pid, "sleeper": sleeper.pid}, "a run", calls=2)
        base = cpu_seconds(busy.pid) or 0.0
        meter.start()
        started = time.monotonic()
        wait_until(lambda: (cpu_seconds(busy.pid) or 0.0) - base >= 0.3, timeout=20, what="0.3 s of CPU")
        sample = meter.stop()
        wall_ms = (time.monotonic() - started) * 1000
    finally:
        for proc in (busy, sleeper):
            proc.kill()
            proc.wait()
    # 0.3 s or more over 2 calls, and never more than one CPU's worth of the wall time
    assert 140 <= sample.ms_per_call["busy"] <= wall_ms / 2 + 20
    assert sample.ms_per_call["sleeper"] < 10
    assert BENCH in sample.ms_per_call and sample.total_ms >= sample.ms_per_call["busy"]


def test_a_process_gone_before_the_end_is_left_out() -> None:
    short = _python("pass")
    meter = CpuMeter(lambda: {"short": short.pid, "bench itself": os.getpid()}, "a run", calls=1)
    meter.start()
    short.wait()
    sample = meter.stop()
    assert "short" not in sample.ms_per_call and "bench itself" in sample.ms_per_call
    assert cpu_seconds(short.pid) is None


def test_the_sequential_calls_are_split_into_turns_that_lose_none() -> None:
    from bench.perf import rounds_of

    assert rounds_of(200, 10) == [20] * 10
    assert rounds_of(30, 10) == [3] * 10
    assert rounds_of(7, 3) == [3, 2, 2] and sum(rounds_of(7, 3)) == 7
    assert rounds_of(4, 10) == [1, 1, 1, 1]
