"""Where a gated call's CPU goes, by process and by what the process runs (`interlock bench perf --profile N`).

Two stacks, one after the other, on the same machine: the first unprofiled, measuring each process's CPU per call
from /proc (bench.perf_cpu) and, in the same stack, a direct REST call's whole CPU (agent, sandbox) for scale; the
second with INTERLOCK_PROFILE_DIR set, so each actor runs yappi on its CPU clock (interlock/profiling.py). After a
warm-up the bench signals the ingress, the gate workers and the rail worker to write and restart their profiles,
makes N gated refunds with A agents at a 0 ms rail, and signals again. Each function's own time is charged to a
cost centre by the file it lives in (the MCP SDK's stack, the rail's HTTP client, redis-py, RQ, SQLite, Interlock's
packages ...); a centre's share of its process, times that process's unprofiled CPU per call, is the estimate in
ms. yappi adds a cost to every Python call, so code that makes many small calls looks larger than it is: shares are
an attribution, the unprofiled column is the measurement.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import os
import pstats
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.perf_rig import PerfRig, run_agents
from interlock.profiling import PROFILE_ENV, PROFILE_SIGNAL, profile_path
from interlock.results import REPO, commit_id
from rails.razorpay import RazorpayClient

PROFILED = ("ingress", "gate", "rail")  # gate: every gate worker's profile together
OWN = ("ingress", "gate", "rail", "reconciler", "redis-server")  # Interlock's own CPU, as the perf summary counts it
GATE_WORKERS = 4
WRITE_WAIT_S = 15.0
CALLER_DEPTH = 4  # how far up the callers a standard-library function's time is carried

# (cost centre, path fragments of the files whose functions it owns); first match wins. Builtins (C functions
# yappi names `<method 'x' of 'y' objects>`, filename `~`) are matched on their names by BUILTIN_CENTRES.
CENTRES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MCP SDK, Starlette, uvicorn, anyio (the protocol layer)",
     ("/mcp/", "/mcp_types/", "/starlette/", "/uvicorn/", "/anyio/", "/sse_starlette/", "/opentelemetry/")),
    ("h11 (HTTP/1.1 parsing, both sides)", ("/h11/",)),
    ("the rail's HTTP client (rails.wire and http.client; httpx, httpcore)",
     (f"{REPO}/rails/wire.py", "/http/client.py", "/httpx/", "/httpcore/")),
    ("redis-py", ("/redis/", "/hiredis/")),
    ("RQ (job fetch, restore, worker loop)", ("/rq/",)),
    ("pydantic", ("/pydantic/", "/pydantic_core/")),
    ("asyncio event loop", ("/asyncio/", "selectors.py")),
    ("threads, futures, queues", ("threading.py", "/concurrent/", "/queue.py")),
    ("logging", ("/logging/",)),
    ("json (standard library)", ("/json/",)),
    ("dates (strptime, RQ's timestamps)", ("_strptime.py", "/datetime.py")),
    ("Interlock: ledger (SQL, state machine, audit chain)", (f"{REPO}/ledger/",)),
    ("Interlock: canonical JSON, SIK, messages", (f"{REPO}/interlock/canonical.py", f"{REPO}/interlock/sik.py",
                                                  f"{REPO}/interlock/messages.py")),  # fmt: skip
    ("Interlock: RQ consumer and producer", (f"{REPO}/runtime/consumer.py", f"{REPO}/interlock/producer.py")),
    ("Interlock: ingress", (f"{REPO}/ingress/",)),
    ("Interlock: gates", (f"{REPO}/gate_workers/",)),
    ("Interlock: rail worker", (f"{REPO}/rail_worker/",)),
    ("Interlock: rail client", (f"{REPO}/rails/",)),
    ("Interlock: other", (f"{REPO}/",)),
)
BUILTIN_CENTRES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SQLite (statements, commits, fsync)", ("sqlite3",)),
    ("sockets (send, recv, poll: system calls)", ("socket", "select", "epoll", "poll")),
    ("json (standard library)", ("json", "c_make_encoder", "scanner")),
    ("hashing", ("sha256", "hashlib", "_hashlib")),
    ("threads, futures, queues", ("lock", "Lock", "thread", "Condition")),
)
OTHER = "standard library and builtins (no caller in a centre)"
LIBRARIES = "other libraries"


def centre_of(filename: str, function: str) -> str:
    if filename in ("~", "", "builtins") or filename.startswith("<"):
        for centre, words in BUILTIN_CENTRES:
            if any(word in function for word in words):
                return centre
        return OTHER
    for centre, fragments in CENTRES:
        if centre.startswith("Interlock") and "site-packages" in filename:
            return LIBRARIES  # a library in the repository's own virtualenv
        if any(fragment in filename for fragment in fragments):
            return centre
    return OTHER


@dataclass
class ProcessProfile:
    name: str
    cpu_ms_per_call: float  # unprofiled, from /proc
    own_s: Counter[str] = field(default_factory=Counter)  # cost centre -> own CPU seconds, under the profiler
    functions: Counter[str] = field(default_factory=Counter)  # "file:line function" -> own CPU seconds

    @property
    def total_s(self) -> float:
        return sum(self.own_s.values())

    def ms(self, centre: str) -> float:
        return self.own_s[centre] / self.total_s * self.cpu_ms_per_call if self.total_s else 0.0


@dataclass
class Calibration:
    """What one client operation costs in CPU without the profiler, in the bench process, against the stack's own
    sandbox and Redis (µs per operation): a check on the profile's estimates for the client libraries."""

    rail_read_us: float  # RazorpayClient.fetch_payment: httpx on the deadline transport, JSON, the Payment model
    stdlib_read_us: float  # the same GET with the standard library's http.client on a kept-alive connection + JSON
    redis_get_us: float  # one redis-py GET round trip (hiredis parser)


CALIBRATION_OPS = 400
COMMANDS_PER_CALL = 17  # Redis commands per gated money call (RESULTS `perf`, held by tests/bench/test_perf_redis.py)


@dataclass
class ProfileReport:
    calls: int
    agents: int
    plain_cpu: dict[str, float]  # process -> CPU ms per call, gated, unprofiled
    direct_cpu: float  # a direct REST call's whole CPU (agent + sandbox), same stack
    plain_rate: float
    profiled_rate: float
    processes: list[ProcessProfile]
    load: tuple[float, float]
    when: str
    calibration: Calibration | None = None


def add_stats(profile: ProcessProfile, path: Path) -> None:
    """Charge each function's own time to a cost centre. A function of the standard library or a generic builtin
    (isinstance, a dict method) is charged to whoever called it, by the time each caller spent in it, up to
    CALLER_DEPTH callers up: an isinstance inside redis-py is redis-py's cost."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    memo: dict[tuple[str, int, str], dict[str, float]] = {}

    def shares(key: tuple[str, int, str], depth: int) -> dict[str, float]:
        if key in memo:
            return memo[key]
        centre = centre_of(key[0], key[2])
        if centre != OTHER or depth >= CALLER_DEPTH or key not in stats:
            return {centre: 1.0}
        memo[key] = {OTHER: 1.0}  # a cycle resolves to OTHER
        callers = stats[key][4]
        weight = sum(edge[3] for edge in callers.values())
        if not callers or weight <= 0:
            return memo[key]
        mixed: dict[str, float] = {}
        for caller, edge in callers.items():
            for name, part in shares(caller, depth + 1).items():
                mixed[name] = mixed.get(name, 0.0) + part * edge[3] / weight
        memo[key] = mixed
        return mixed

    for key, (_, _, own, _, _) in stats.items():
        for centre, part in shares(key, 0).items():
            profile.own_s[centre] += own * part
        filename, line, function = key
        short = filename.replace(f"{REPO}/", "").split("site-packages/")[-1].split("lib/python3.11/")[-1]
        profile.functions[f"{short}:{line} {function}"] += own


def _signal_and_collect(pids: dict[str, int], directory: Path, n: int) -> dict[str, Path]:
    for name in pids:
        os.kill(pids[name], PROFILE_SIGNAL)
    deadline = time.monotonic() + WRITE_WAIT_S
    paths = {name: profile_path(directory, pid, n) for name, pid in pids.items()}
    while time.monotonic() < deadline and not all(p.exists() for p in paths.values()):
        time.sleep(0.1)
    time.sleep(0.5)  # a file appears when its write starts
    missing = [name for name, p in paths.items() if not p.exists()]
    if missing:
        raise RuntimeError(f"no profile from {missing} within {WRITE_WAIT_S:.0f} s (is yappi installed?)")
    return paths


def _cpu_us(operation: Callable[[], object], n: int) -> float:
    operation()  # connect, warm caches
    started = time.thread_time()
    for _ in range(n):
        operation()
    return (time.thread_time() - started) / n * 1e6


def calibrate_rig(rig: PerfRig) -> Calibration:
    env = rig.stack.env
    (payment,) = rig.payments(1)
    return calibrate(env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"],
                     payment, rig.stack.redis_url or "")  # fmt: skip


def calibrate(url: str, key_id: str, secret: str, payment: str, redis_url: str,
              n: int = CALIBRATION_OPS) -> Calibration:  # fmt: skip
    """CPU per operation of the clients the profile charges most, each on its own, unprofiled: a payment read on
    the rail at *url* (which has *payment*) — through the rail client, and as a bare http.client GET for the
    floor — and a GET on the Redis at *redis_url*."""
    path = f"/v1/payments/{payment}"
    with RazorpayClient(url, key_id, secret) as client:
        rail_us = _cpu_us(lambda: client.fetch_payment(payment), n)
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port)
    headers = {"Authorization": "Basic " + base64.b64encode(f"{key_id}:{secret}".encode()).decode(),
               "Accept": "application/json"}  # fmt: skip

    def stdlib_get() -> object:
        conn.request("GET", path, headers=headers)
        return json.loads(conn.getresponse().read())

    try:
        stdlib_us = _cpu_us(stdlib_get, n)
    finally:
        conn.close()
    r = redis.Redis.from_url(redis_url)
    try:
        redis_us = _cpu_us(lambda: r.get("interlock:bench:calibration"), n)
    finally:
        r.close()
    return Calibration(rail_us, stdlib_us, redis_us)


def run_profile(base: Path, calls: int, agents: int, *, echo: Callable[[str], None] = print) -> ProfileReport:
    plain = PerfRig(base / "plain", gate_workers=GATE_WORKERS).start()
    try:
        run_agents(plain, "gated", agents, 40)  # warm-up
        gated, seconds, cpu = run_agents(plain, "gated", agents, calls, cpu_label="gated")
        _, _, direct = run_agents(plain, "direct", agents, calls, cpu_label="direct")
        try:
            calibration: Calibration | None = calibrate_rig(plain)
        except Exception as exc:  # noqa: BLE001 - a check on the profile must not lose the profile
            echo(f"calibration failed, the section goes without it: {exc}")
            calibration = None
    finally:
        plain.stop()
    assert cpu is not None and direct is not None
    plain_rate = len(gated) / seconds
    echo(f"unprofiled: {plain_rate:.1f} gated calls/s, CPU per call {cpu.total_ms:.2f} ms")
    directory = base / "profiles"
    previous = os.environ.get(PROFILE_ENV)
    os.environ[PROFILE_ENV] = str(directory)  # the stack's actors inherit it
    try:
        rig = PerfRig(base / "profiled", gate_workers=GATE_WORKERS).start()
    finally:
        if previous is None:
            os.environ.pop(PROFILE_ENV, None)
        else:
            os.environ[PROFILE_ENV] = previous
    try:
        run_agents(rig, "gated", agents, 40)
        pids = {name: pid for name, pid in rig.pids().items() if name.rstrip("0123456789") in PROFILED}
        for path in _signal_and_collect(pids, directory, 1).values():
            path.unlink()  # the start and the warm-up
        profiled, profiled_s, _ = run_agents(rig, "gated", agents, calls)
        paths = _signal_and_collect(pids, directory, 2)
    finally:
        rig.stop()
    processes = []
    for name in PROFILED:
        mine = [n for n in paths if n.rstrip("0123456789") == name]
        profile = ProcessProfile(name, sum(cpu.ms_per_call.get(n, 0.0) for n in mine))
        for n in mine:
            add_stats(profile, paths[n])
        processes.append(profile)
    echo(f"profiled: {len(profiled) / profiled_s:.1f} gated calls/s")
    load = os.getloadavg()
    return ProfileReport(calls, agents, cpu.ms_per_call, direct.total_ms, plain_rate, len(profiled) / profiled_s,
                         processes, (load[0], load[1]),
                         datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), calibration)  # fmt: skip


def own_cpu(cpu: dict[str, float]) -> float:
    return sum(ms for name, ms in cpu.items() if name.rstrip("0123456789") in OWN)


def render(report: ProfileReport, *, command: str, top: int = 8) -> str:
    own = own_cpu(report.plain_cpu)
    lines = [
        "## Where a gated call's CPU goes (profile)",
        "",
        f"Evidence: **real process** (sandbox, Redis, {GATE_WORKERS} gate workers, 1 rail worker, reconciler, HTTP "
        f"ingress), **sandbox rail** at 0 ms, **scripted agent** ({report.agents} concurrent MCP clients, "
        f"{report.calls} refunds). Commit `{commit_id()}`, {report.when}, load average {report.load[0]:.2f} / "
        f"{report.load[1]:.2f} (1 / 5 min) on {os.cpu_count()} CPUs when the run ended. Reproduce: `{command}`.",
        "",
        "CPU per call is measured without the profiler (/proc, user + system, every thread), on a first stack; a "
        "second stack runs each actor under yappi (CPU clock, every thread, builtins included) and attributes its own "
        "time, function by function, to the cost centres below by the file each function lives in. An estimate in "
        "ms is a centre's share of its process times that process's unprofiled CPU per call. yappi charges a cost to "
        "every Python call, so call-heavy Python looks larger than it is, C (SQLite, sockets, JSON) smaller. "
        f"Throughput, {report.agents} agents: {report.plain_rate:.1f} calls/s unprofiled, {report.profiled_rate:.1f} "
        "profiled.",
        "",
        f"Interlock's own CPU per gated call: **{own:.2f} ms** (ingress, gate workers, rail worker, reconciler, "
        f"Redis), {own / report.direct_cpu:.1f}x the whole CPU of a direct REST call in the same stack "
        f"({report.direct_cpu:.2f} ms: agent + sandbox).",
        "",
        "| process | CPU per call, ms (unprofiled) |",
        "|---|---|",
    ]
    for name, ms in sorted(report.plain_cpu.items(), key=lambda item: -item[1]):
        lines.append(f"| {name} | {ms:.2f} |")
    for profile in report.processes:
        label = "gate workers (all four)" if profile.name == "gate" else profile.name
        lines += ["", f"### {label}: {profile.cpu_ms_per_call:.2f} ms per call", "",
                  "| cost centre | share | ≈ ms per call |", "|---|---|---|"]  # fmt: skip
        for centre, seconds in profile.own_s.most_common():
            share = seconds / profile.total_s if profile.total_s else 0.0
            if share >= 0.005:
                lines.append(f"| {centre} | {share:.0%} | {profile.ms(centre):.2f} |")
        lines += ["", f"Top {top} functions by own time:", "", "| function | share |", "|---|---|"]
        for function, seconds in profile.functions.most_common(top):
            lines.append(f"| `{function}` | {seconds / profile.total_s:.1%} |")
    lines += ["", _headline(report)]
    if report.calibration is not None:
        lines += ["", *_calibration_lines(report.calibration)]
    return "\n".join(lines) + "\n"


def _client_cost(c: Calibration) -> str:
    extra_ms = 2 * (c.rail_read_us - c.stdlib_read_us) / 1000
    if extra_ms < 0.05:  # within what one run's noise moves either figure
        return "the rail client, its deadline, send window and Payment model included, costs what the bare GET costs"
    return (f"the rail client costs {extra_ms:.2f} ms of CPU a call above the bare GET (its deadline and send "
            "window, the Payment model)")


def _calibration_lines(c: Calibration) -> list[str]:
    return [
        f"### The client libraries, measured without the profiler ({CALIBRATION_OPS} operations each, "
        "the bench's own thread CPU, the same stack's sandbox and Redis)",
        "",
        "| operation | CPU µs per operation |",
        "|---|---|",
        f"| the rail client's payment read (`RazorpayClient.fetch_payment`: rails.wire with its deadline and send "
        f"window, JSON, the Payment model) | {c.rail_read_us:.0f} |",
        f"| the same GET with the standard library's `http.client`, kept-alive connection, JSON | "
        f"{c.stdlib_read_us:.0f} |",
        f"| one redis-py `GET` round trip (hiredis parser) | {c.redis_get_us:.0f} |",
        "",
        f"A gated refund makes two rail requests (the gate's read, the rail worker's money call): {_client_cost(c)}; "
        f"its ~{COMMANDS_PER_CALL} Redis commands cost about {COMMANDS_PER_CALL * c.redis_get_us / 1000:.2f} ms in "
        "redis-py at this rate. "
        "Where these are smaller than the centres above, the profiler's per-call cost inflates call-heavy Python.",
    ]


def _headline(report: ProfileReport) -> str:
    """The largest cost centres across Interlock's profiled processes, in ms per call."""
    totals: dict[str, float] = {}
    for profile in report.processes:
        for centre in profile.own_s:
            totals[centre] = totals.get(centre, 0.0) + profile.ms(centre)
    largest = sorted(totals.items(), key=lambda item: -item[1])[:6]
    parts = "; ".join(f"{centre} {ms:.2f} ms" for centre, ms in largest)
    return f"Largest cost centres over the ingress, gate workers and rail worker (≈ ms per call): {parts}."
