"""`interlock fuzz`: hostile input at the ingress, over streamable HTTP and stdio (issue 17, item 1).

A real stack (redis-server, the sandbox rail with one refundable payment, a gate worker, the rail worker,
the reconciler, the HTTP ingress) plus a stdio ingress launched the way an agent's MCP client launches it.
The inputs (chaos.fuzz_inputs) are malformed by construction. The verdict (`judge`):

* no crash — both ingress processes are alive at the end and answered every liveness probe (a valid
  `tools/list` on each transport, every PROBE_EVERY inputs);
* bounded memory — each ingress's RSS after the run is within RSS_GROWTH_MIB of its RSS after warm-up,
  and never above RSS_PEAK_MIB;
* a clear answer to each input — a tool result with isError and an `{error: {code}}` body other than
  INTERNAL_ERROR, a JSON-RPC error object, or an HTTP 4xx (3xx for a path redirected to /mcp); never a
  successful result, a 5xx or
  silence (only a request body the client abandoned half way is owed no answer);
* nothing recorded — no proposal enqueued (the ingress logs each one), no decision and no intent in the
  ledger, no money call in the sandbox rail's journal;
* the harness can see a slip — after the fuzz, one valid refund (the control) must yield exactly one
  proposal, one intent and one rail call; otherwise the zeros above prove nothing.
"""

from __future__ import annotations

import json
import shlex
import signal
import sqlite3
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from chaos.fuzz_inputs import FAMILIES, PAYMENT_ID, FuzzInput, build_inputs
from chaos.fuzz_wire import TOOLS_LIST, Answer, HttpSession, StdioIngress, messages, send_raw_http, send_stdio
from chaos.trial import AGENT, MANDATE, TOKEN
from deploy.agent_client import SandboxControl
from deploy.stack import Stack
from ingress.tokens import token_sha256
from interlock.results import commit_id, write_section
from sandbox.journal import JOURNAL_FILENAME

CONTROL_PAYMENT = "pay_fuzzControl01"
PROBE_EVERY = 250
RSS_GROWTH_MIB = 64
RSS_PEAK_MIB = 768
HTTP_WORKERS = 6
ENV = {"INTERLOCK_OUTCOME_WAIT_MS": "3000", "INTERLOCK_RAIL_TIMEOUT_MS": "2000"}
ENQUEUED = "enqueued: agent="  # ingress.money logs this once per proposal put on the gates queue


@dataclass
class FuzzReport:
    inputs: int = 0
    seed: int = 0
    per_family: Counter[str] = field(default_factory=Counter)
    per_transport: Counter[str] = field(default_factory=Counter)
    per_kind: dict[str, Counter[str]] = field(default_factory=dict)  # family/kind -> outcome counts
    bad: list[str] = field(default_factory=list)  # inputs without a clear answer (kind: what came back)
    crashes: int = 0
    probes: int = 0
    probes_failed: int = 0
    intents: int = 0
    decisions: int = 0
    rail_calls: int = 0
    enqueued: int = 0
    rss_mib: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # ingress -> warm, peak, end
    control: str = ""  # "" until the control ran; "ok" when it left exactly one trace everywhere
    seconds: float = 0.0

    def line(self) -> str:
        return (f"fuzz: {self.inputs} inputs, {self.crashes} crashes, {self.intents} intents, "
                f"{self.rail_calls} rail calls")


def judge(report: FuzzReport) -> list[str]:
    """Every way the run failed; empty when the ingress held."""
    problems = []
    if report.crashes:
        problems.append(f"CRASH: {report.crashes} ingress deaths or failed liveness probes")
    if report.probes == 0:
        problems.append("NO_PROBES: the ingress was never shown alive")
    for name, value in (("intents", report.intents), ("decisions", report.decisions),
                        ("rail calls", report.rail_calls), ("proposals enqueued", report.enqueued)):  # fmt: skip
        if value:
            problems.append(f"RECORDED: {value} {name} from malformed input")
    if report.bad:
        problems.append(f"UNCLEAR: {len(report.bad)} inputs without a clear error, e.g. {report.bad[:5]}")
    for name, (warm, peak, end) in report.rss_mib.items():
        if end - warm > RSS_GROWTH_MIB or peak > RSS_PEAK_MIB:
            problems.append(f"MEMORY: {name} RSS warm {warm:.0f} MiB, peak {peak:.0f}, end {end:.0f}")
    if report.control != "ok":
        problems.append(f"CONTROL: the valid refund after the fuzz did not leave one trace "
                        f"({report.control or 'not run'})")
    missing = [f for f in FAMILIES if not report.per_family.get(f)]
    if missing:
        problems.append(f"COVERAGE: no input of family {', '.join(missing)}")
    return problems


def is_clear(item: FuzzInput, answer: Answer) -> bool:
    if answer.outcome in ("tool_error", "rpc_error", "http_4xx", "http_3xx"):
        return True
    # Nothing owed only to a client that went away: a body abandoned half way, a chunk never finished.
    return answer.outcome in ("none", "dropped") and not item.expects_answer


# -- the run ------------------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def count(path: Path, sql: str) -> int:
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


class Fuzzer:
    def __init__(self, data_dir: Path, seed: int) -> None:
        self.data_dir = data_dir
        self.seed = seed
        self.stack = Stack(data_dir, env={"INTERLOCK_MANDATE": str(MANDATE), **ENV})
        self.stdio: StdioIngress | None = None
        self.http: HttpSession | None = None
        self.port = 0
        self.rss: dict[str, list[float]] = {"http": [], "stdio": []}
        self.report = FuzzReport(seed=seed)
        self._lock = threading.Lock()

    def start(self) -> None:
        tokens = self.data_dir / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n", encoding="utf-8")
        self.stack.start_redis()
        sandbox_url = self.stack.start_sandbox(seed=self.seed)
        self.control = SandboxControl(sandbox_url, self.stack.env["INTERLOCK_RAIL_KEY_ID"],
                                      self.stack.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip
        self.control.add_payment(PAYMENT_ID, 50_000_000)
        self.control.add_payment(CONTROL_PAYMENT, 189_900)
        url = self.stack.start_ingress(tokens_file=tokens, wait=False)
        self.port = int(url.split(":")[2].split("/")[0])
        self.stack.start_engine()
        self.stack.wait_for_ingress()
        self.http = HttpSession(url)
        env = {**self.stack.base_env(), "INTERLOCK_AGENT_ID": AGENT, "INTERLOCK_KILL_AT": ""}
        self.stdio = StdioIngress(env, self.data_dir / "logs" / "stdio-ingress.log")
        self.stdio.start()

    def probe(self) -> None:
        """A valid tools/list on each transport, and the RSS of each ingress."""
        assert self.http is not None and self.stdio is not None
        ok_http = self.stack.actors["ingress"].alive() and self._http_probe()
        msgs = self.stdio.exchange(TOOLS_LIST, answer_id="probe")
        ok_stdio = self.stdio.alive() and any(m.get("id") == "probe" and "result" in m for m in msgs)
        with self._lock:
            self.report.probes += 2
            self.report.probes_failed += (not ok_http) + (not ok_stdio)
        self.rss["http"].append(rss_mib(self.stack.actors["ingress"].pid))
        self.rss["stdio"].append(rss_mib(self.stdio.pid))

    def _http_probe(self) -> bool:
        assert self.http is not None
        try:
            response = self.http.client.post(self.http.url, headers=self.http.headers(), content=TOOLS_LIST)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and any("result" in m for m in messages(response))

    def send(self, item: FuzzInput, rid: int) -> None:
        assert self.http is not None and self.stdio is not None
        if item.family == "http":
            answer = send_raw_http(self.port, self.http.session, item)
        elif item.transport == "http":
            answer = self.http.post(item.body.replace(b'"id":ID', b'"id":%d' % rid))
        else:
            answer = send_stdio(self.stdio, item, rid)
        key = f"{item.family}/{item.kind}"
        with self._lock:
            self.report.per_family[item.family] += 1
            self.report.per_transport[item.transport] += 1
            self.report.per_kind.setdefault(key, Counter())[f"{answer.outcome} {answer.code}".strip()] += 1
            if not is_clear(item, answer):
                self.report.bad.append(f"{item.transport} {key}: {answer.outcome} {answer.code}"[:200])

    def run(self, inputs: list[FuzzInput], progress: bool) -> None:
        stdio_items = [(i, x) for i, x in enumerate(inputs, 1) if x.transport == "stdio"]
        http_items = [(i, x) for i, x in enumerate(inputs, 1) if x.transport == "http"]
        self.probe()
        done = [0]

        def tick() -> None:
            with self._lock:
                done[0] += 1
                due = done[0] % PROBE_EVERY == 0
                if progress and done[0] % 1000 == 0:
                    print(f"fuzz: {done[0]}/{len(inputs)} sent", file=sys.stderr, flush=True)
            if due:
                self.probe()

        def stdio_loop() -> None:
            for rid, item in stdio_items:
                self.send(item, rid)
                tick()

        def http_one(pair: tuple[int, FuzzInput]) -> None:
            self.send(pair[1], pair[0])
            tick()

        runner = threading.Thread(target=stdio_loop, daemon=True)
        runner.start()
        with ThreadPoolExecutor(HTTP_WORKERS) as pool:
            list(pool.map(http_one, http_items))
        runner.join()
        self.probe()

    def tally(self) -> None:
        """Count what the fuzz left behind, then run the control and check that it is seen."""
        assert self.stdio is not None
        report = self.report
        report.crashes = report.probes_failed + (not self.stdio.alive()) + (not self.stack.actors["ingress"].alive())
        self._count(report)
        for name, samples in self.rss.items():
            warm = samples[min(len(samples) - 1, max(1, len(samples) // 5))]
            report.rss_mib[name] = (warm, max(samples), samples[-1])
        report.control = self._control(report)

    def _count(self, report: FuzzReport) -> None:
        ledger = self.stack.ledger_path
        report.intents = count(ledger, "SELECT COUNT(*) FROM intents")
        report.decisions = count(ledger, "SELECT COUNT(*) FROM decisions")
        report.rail_calls = count(self.data_dir / "sandbox" / JOURNAL_FILENAME,
                                  "SELECT COUNT(*) FROM entities WHERE origin = 'api'")  # fmt: skip
        report.enqueued = self._enqueued()

    def _enqueued(self) -> int:
        logs = [self.stack.actors["ingress"].log_path, self.data_dir / "logs" / "stdio-ingress.log"]
        return sum(p.read_text(errors="replace").count(ENQUEUED) for p in logs if p.exists())

    def _control(self, before: FuzzReport) -> str:
        assert self.http is not None
        frame = json.dumps({"jsonrpc": "2.0", "id": "control", "method": "tools/call", "params": {
            "name": "create_refund", "arguments": {"payment_id": CONTROL_PAYMENT, "amount": 1000}}})
        answer = self.http.post(frame.encode())
        after = FuzzReport()
        self._count(after)
        seen = (after.intents - before.intents, after.rail_calls - before.rail_calls, after.enqueued - before.enqueued)
        if answer.outcome == "success" and seen == (1, 1, 1):
            return "ok"
        return f"answer {answer.outcome} {answer.code}; new intents, rail calls, proposals = {seen}"

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        if self.stdio is not None:
            self.stdio.stop()
        self.stack.stop()


def run_fuzz(n: int, seed: int, data_dir: Path, *, progress: bool = False) -> FuzzReport:
    """Build *n* inputs, throw them at a fresh stack in *data_dir*, and count what came back and what was left."""
    started = time.monotonic()
    inputs = build_inputs(n, seed)
    data_dir.mkdir(parents=True, exist_ok=True)
    fuzzer = Fuzzer(data_dir, seed)
    try:
        fuzzer.start()
        fuzzer.run(inputs, progress)
        fuzzer.tally()
    finally:
        fuzzer.stop()
    fuzzer.report.inputs = len(inputs)
    fuzzer.report.seconds = time.monotonic() - started
    return fuzzer.report


def summarise(report: FuzzReport, *, command: str) -> str:
    problems = judge(report)
    lines = [
        "## Fuzz: hostile input at the ingress",
        "",
        "Evidence class: **real process** × **sandbox rail**. A fresh stack (redis-server, sandbox rail, gate",
        "worker, rail worker, reconciler, HTTP ingress) plus a stdio ingress launched as an MCP client launches it.",
        "Every input is malformed by construction (chaos/fuzz_inputs.py says what counts as malformed):",
        "hypothesis-generated tool arguments, malformed JSON-RPC frames, raw HTTP abuse. Passing means: both",
        "ingress processes alive and answering a valid `tools/list` every "
        f"{PROBE_EVERY} inputs; RSS growth after warm-up ≤ {RSS_GROWTH_MIB} MiB;",
        "each input answered by a clear error (an `isError` result with an error code other than INTERNAL_ERROR,",
        "a JSON-RPC error or an HTTP 4xx; silence only where nothing is owed); no proposal enqueued, no decision,",
        "no intent, no rail money call; and one valid refund afterwards leaves exactly one of each.",
        "",
        f"- command: `{command}`",
        f"- seed: {report.seed}; commit: {commit_id()}; date: {time.strftime('%Y-%m-%d')}; wall time: "
        f"{report.seconds:.0f} s",
        f"- **{report.line()}**; decisions {report.decisions}; proposals enqueued {report.enqueued}; inputs "
        f"without a clear error {len(report.bad)}; liveness probes {report.probes} ({report.probes_failed} failed)",
        f"- inputs per family: {_counts(report.per_family)}; per transport: {_counts(report.per_transport)}",
        "- RSS (MiB, warm / peak / end): "
        + "; ".join(f"{k} ingress {w:.0f} / {p:.0f} / {e:.0f}" for k, (w, p, e) in sorted(report.rss_mib.items())),
        f"- control refund after the fuzz: {report.control}",
        f"- verdict: {'PASS' if not problems else 'FAIL — ' + '; '.join(problems)}",
        "",
        "| family / kind | inputs | answers |",
        "|---|---|---|",
    ]
    for key in sorted(report.per_kind):
        outcomes = report.per_kind[key]
        lines.append(f"| {key} | {sum(outcomes.values())} | {_counts(outcomes)} |")
    return "\n".join(lines)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def fuzz_main(n: int, seed: int, out: Path, *, write: bool) -> int:
    # A SIGTERM unwinds like Ctrl-C, so the stack's processes are stopped by pid on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run_dir = out.resolve() / f"fuzz-{time.strftime('%Y%m%d-%H%M%S')}"
    report = run_fuzz(n, seed, run_dir, progress=True)
    command = "interlock fuzz " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    section = summarise(report, command=command.strip())
    (run_dir / "fuzz.md").write_text(section + "\n", encoding="utf-8")
    if write:
        write_section("fuzz", section)
    problems = judge(report)
    for problem in problems:
        print(f"  {problem[:400]}")
    print(f"fuzz: per family {_counts(report.per_family)}; per transport {_counts(report.per_transport)}; "
          f"{report.seconds:.0f} s; report {run_dir / 'fuzz.md'}")
    print(report.line())
    return 1 if problems else 0
