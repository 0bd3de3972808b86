"""`interlock fuzz --flood`: each HTTP listener of a real stack flooded with hostile connections while a real
client is timed (issue 46 item 2; interlock.http_serve, ADR 0017).

The stack is the one an operator starts: `interlock up` (supervisord, the embedded Redis, the sandbox rail, every
actor) in a fresh data directory, with the example mandate's daily windows widened so that the timed calls are not
refused for the count. One listener at a time is flooded by this process: `hostile` connections kept open at once,
each reopened as soon as the listener closes it, in five kinds —

* idle: connects and sends nothing;
* half_head: half a request head (`POST <path> HTTP/1.1` and a Host line), then nothing;
* trickled_body: a whole head announcing a 100 kB body, then one byte of it a second;
* oversized_header: one header line of 64 KiB, sent a kilobyte at a time;
* repeated_headers: the same header line thousands of times, a hundred at a time, never ending the head;

while the real client makes its requests one after another, each timed from its first byte to its answer:

* ingress: an agent's money call — a fresh MCP session (the SDK's streamable HTTP client with the agent's bearer
  token), `create_refund` of Rs 10 on a fresh sandbox payment, answered with a definite state;
* webhooks: a signed `refund.processed` delivery with a fresh event id, answered 200 `accepted`;
* console: the approver's page load (`/holds`, logged in with their own token) and the approval of a call held
  before the flood (the form's CSRF value and terms, as a browser posts them), answered 200 and 303.

"Held" is the median count of hostile connections this process had open at once while the real requests were timed,
sampled every 100 ms (the fewest is reported beside it): the attacker's side of each connection, the listener's
deadlines closing them as fast as they are reopened. The verdict asks every real request answered with p99 under
2,000 ms while at least 2,000 were held (the attacker keeps trying to hold more, `hostile`: the listeners close an
oversized or endless head at once and the rest at their deadlines, and each takes a moment to reopen).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from deploy.agent_client import SandboxControl, StackInfo, mcp_client, structured
from deploy.stack import INTERLOCK
from interlock.ports import free_port
from interlock.results import commit_id, write_section

KINDS = ("idle", "half_head", "trickled_body", "oversized_header", "repeated_headers")
P99_TARGET_MS = 2000
HELD_TARGET = 2000  # hostile connections open at once while the real requests are timed (issue 46)
SAMPLE_EVERY_S = 0.1
REOPEN_AFTER_S = 0.01
RAMP_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 30.0
HELD_AMOUNT = 350_000  # above the example mandate's hold_above_minor (Rs 3,000): a person must release it
LISTENERS = ("ingress", "webhooks", "console")


@dataclass
class Flood:
    """Hostile connections to one listener, kept open from a thread of their own (one event loop)."""

    port: int
    path: str
    hostile: int
    open_now: int = 0
    opened: int = 0
    closed_by_listener: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # connect errors, by kind
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="flood", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    async def _run(self) -> None:
        tasks = [asyncio.create_task(self._hold(n)) for n in range(self.hostile)]
        while not self._stop.is_set():
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _hold(self, n: int) -> None:
        kind = KINDS[n % len(KINDS)]
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError as exc:
                self.refused[type(exc).__name__] += 1
                await asyncio.sleep(0.1)
                continue
            self.open_now += 1
            self.opened += 1
            try:
                await self._misbehave(kind, reader, writer)
                self.closed_by_listener += 1
            except (OSError, asyncio.IncompleteReadError):
                self.closed_by_listener += 1  # reset by the listener
            finally:
                self.open_now -= 1
                writer.close()
            await asyncio.sleep(REOPEN_AFTER_S)

    async def _misbehave(self, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Send *kind*'s bytes, as slowly as it sends them, until the listener closes the connection."""
        head = f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode()
        closed = asyncio.create_task(_drained(reader))
        chunks: list[tuple[bytes, float]]
        if kind == "idle":
            chunks = []
        elif kind == "half_head":
            chunks = [(head, 0)]
        elif kind == "trickled_body":
            body = b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            chunks = [(head + body, 0)] + [(b" ", 1.0)] * 100_000
        elif kind == "oversized_header":
            chunks = [(head + b"X-Flood: ", 0)] + [(b"a" * 1024, 0.05)] * 64
        else:
            chunks = [(head, 0)] + [(b"X-Flood: again\r\n" * 100, 0.1)] * 1000
        for data, pause in chunks:
            if closed.done() or self._stop.is_set():
                break
            if pause:
                await asyncio.wait([closed], timeout=pause)
                if closed.done():
                    break
            writer.write(data)
            await writer.drain()
        while not closed.done() and not self._stop.is_set():
            await asyncio.wait([closed], timeout=0.2)
        closed.cancel()


async def _drained(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(65536):
            pass
    except OSError:
        pass  # reset by the listener: closed all the same


@dataclass
class Timed:
    listener: str
    held: int  # hostile connections open at once while timed: the median of the samples
    fewest: int  # ... and the fewest
    opened: int
    closed: int
    answered: int
    asked: int
    ms: list[float]
    problems: list[str]

    def p(self, q: float) -> float:
        if not self.ms:
            return float("nan")
        ordered = sorted(self.ms)
        return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]

    def line(self) -> str:
        return (f"listener flood: {self.listener} held {self.held} hostile connections; real requests answered "
                f"{self.answered}/{self.asked}, p50 {self.p(0.5):.0f} ms, p99 {self.p(0.99):.0f} ms")  # fmt: skip

    def passed(self) -> bool:
        return self.answered == self.asked and self.p(0.99) < P99_TARGET_MS and self.held >= HELD_TARGET


class Stack:
    """`interlock up` in a fresh data directory, stopped by its pid (SIGINT, as Ctrl-C); every listener's cap on
    open connections is *max_connections*."""

    def __init__(self, data: Path, max_connections: int) -> None:
        self.data = data
        self.ports = {name: free_port() for name in ("sandbox", "ingress", "redis", "console", "webhooks")}
        data.mkdir(parents=True, exist_ok=True)
        mandate = yaml.safe_load(Path(__file__).resolve().parents[1].joinpath("deploy", "mandate.example.yaml")
                                 .read_text(encoding="utf-8"))  # fmt: skip
        # The timed calls must be judged on their merits, not refused for the day's count.
        mandate["limits"]["windows"] = [{"window_ms": 86_400_000, "max_calls": 100_000,
                                         "max_amount_minor": 10**12, "currency": "INR"}]  # fmt: skip
        mandate["limits"]["fee_budgets"] = {"INR": {"window_ms": 86_400_000, "max_fee_minor": 10**9}}
        self.mandate = data / "flood-mandate.yaml"
        self.mandate.write_text(yaml.safe_dump(mandate, sort_keys=False), encoding="utf-8")
        self.log = data / "up.log"
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("INTERLOCK_")}
        env["INTERLOCK_HTTP_MAX_CONNECTIONS"] = str(max_connections)
        args = [*INTERLOCK, "up", "--data", str(data), "--mandate", str(self.mandate),
                *(x for name, port in self.ports.items() for x in (f"--{_flag(name)}-port", str(port)))]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while "interlock: stack ready" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"interlock up did not get ready:\n{self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def secret(self, name: str) -> str:
        return (self.data / name).read_text(encoding="utf-8").strip()


def _flag(name: str) -> str:
    return {"webhooks": "webhook"}.get(name, name)


def flood_main(hostile: int, requests: int, out: Path, *, write: bool, max_connections: int) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    _raise_fd_limit(hostile + 512)
    started = time.monotonic()
    run_dir = out.resolve() / f"flood-{time.strftime('%Y%m%d-%H%M%S')}"
    stack = Stack(run_dir / "data", max_connections)
    results: list[Timed] = []
    try:
        stack.wait_ready()
        info = StackInfo.load(stack.data)
        for listener in LISTENERS:
            results.append(_flood_one(stack, info, listener, hostile, requests))
            print(results[-1].line(), flush=True)
    finally:
        stack.stop()
    command = "interlock fuzz " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    section = summarise(results, hostile=hostile, command=command.strip(), seconds=time.monotonic() - started,
                        max_connections=max_connections)
    (run_dir / "flood.md").write_text(section + "\n", encoding="utf-8")
    if write:
        write_section("flood", section)
    failed = [r.listener for r in results if not r.passed()]
    for r in results:
        for problem in r.problems[:5]:
            print(f"  {r.listener}: {problem[:300]}")
    print(f"flood: {len(results) - len(failed)}/{len(results)} listeners held; report {run_dir / 'flood.md'}")
    return 1 if failed else 0


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            raise SystemExit(f"the flood needs {needed} file descriptors; this process may open {hard} (ulimit -n)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _flood_one(stack: Stack, info: StackInfo, listener: str, hostile: int, requests: int) -> Timed:
    """Prepare the real client's requests, flood *listener*, time them, stop the flood."""
    port = stack.ports[listener]
    path = {"ingress": "/mcp", "webhooks": "/webhooks/razorpay", "console": "/login"}[listener]
    real = _real_client(stack, info, listener, requests)  # set up before the flood: held calls, a login
    flood = Flood(port, path, hostile)
    flood.start()
    deadline = time.monotonic() + RAMP_TIMEOUT_S
    while flood.open_now < hostile and time.monotonic() < deadline:
        time.sleep(0.1)
    samples: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            samples.append(flood.open_now)
            time.sleep(SAMPLE_EVERY_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ms: list[float] = []
    problems: list[str] = []
    try:
        for request in real:
            began = time.perf_counter()
            try:
                problem = request()
            except Exception as exc:  # a real request that failed is counted as unanswered, with what it got
                problem = f"{type(exc).__name__}: {exc}"
            if problem is None:
                ms.append((time.perf_counter() - began) * 1000)
            else:
                problems.append(problem)
    finally:
        sampling.set()
        sampler.join()
        flood.stop()
    return Timed(listener, int(statistics.median(samples)) if samples else 0, min(samples, default=0), flood.opened,
                 flood.closed_by_listener, len(ms), len(real), ms, problems)  # fmt: skip


def _real_client(stack: Stack, info: StackInfo, listener: str, requests: int) -> list[Callable[[], str | None]]:
    """The timed requests for *listener*: each returns None when answered as it should be, else what it got."""
    assert info.sandbox_url and info.rail_key_id and info.rail_key_secret
    rail = SandboxControl(info.sandbox_url, info.rail_key_id, info.rail_key_secret)
    run = f"{int(time.time() * 1000) % 10**10}"
    if listener == "ingress":
        def money_call(n: int) -> Callable[[], str | None]:
            payment = f"pay_flood{run}{n:03d}"
            rail.add_payment(payment, 100_000)

            def call() -> str | None:
                return asyncio.run(_refund(info, payment, 1_000))
            return call
        return [money_call(n) for n in range(requests)]
    if listener == "webhooks":
        secret = stack.secret("webhook.secret")
        url = info.webhook_url or f"http://127.0.0.1:{stack.ports['webhooks']}/webhooks/razorpay"

        def delivery(n: int) -> Callable[[], str | None]:
            def deliver() -> str | None:
                body = json.dumps({"entity": "event", "account_id": "acc_flood", "event": "refund.processed",
                                   "contains": ["refund"], "created_at": int(time.time()),
                                   "payload": {"refund": {"entity": {"id": f"rfnd_flood{run}{n}", "notes": {}}}}},
                                  ).encode()  # fmt: skip
                signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
                answer = httpx.post(url, content=body, timeout=REQUEST_TIMEOUT_S, headers={
                    "Content-Type": "application/json", "X-Razorpay-Signature": signature,
                    "X-Razorpay-Event-Id": f"evt_flood{run}{n}"})  # fmt: skip
                if answer.status_code == 200 and answer.json().get("status") == "accepted":
                    return None
                return f"HTTP {answer.status_code} {answer.text[:200]}"
            return deliver
        return [delivery(n) for n in range(requests)]
    return _console_requests(stack, info, rail, run, requests)


async def _refund(info: StackInfo, payment: str, amount: int) -> str | None:
    async with mcp_client(info.mcp_url, info.token(), timeout_s=REQUEST_TIMEOUT_S) as client:
        answer = structured(await client.call_tool("create_refund", {"payment_id": payment, "amount": amount}))
    if answer.get("state") in ("APPLIED", "IN_FLIGHT", "UNKNOWN", "HELD", "BLOCKED", "CONFIRMED_NOT_APPLIED"):
        return None  # a definite answer from the whole path (gate, rail worker, rail)
    return f"no state in the answer: {json.dumps(answer)[:200]}"


def _console_requests(stack: Stack, info: StackInfo, rail: SandboxControl, run: str,
                      requests: int) -> list[Callable[[], str | None]]:  # fmt: skip
    """Calls held for a person before the flood; during it, the approver's page load and approval of each."""
    approver_tokens = sorted(stack.data.glob("approver-*.token"))
    if not approver_tokens:
        raise SystemExit("the flood's mandate names no approver: the console has nothing to approve")
    siks = []
    for n in range(max(1, requests // 2)):
        payment = f"pay_floodhold{run}{n:03d}"
        rail.add_payment(payment, 400_000)
        siks.append(asyncio.run(_held(info, payment)))
    base = f"http://127.0.0.1:{stack.ports['console']}"
    http = httpx.Client(base_url=base, follow_redirects=False, timeout=REQUEST_TIMEOUT_S)
    login = http.post("/login", data={"token": approver_tokens[0].read_text(encoding="utf-8").strip(),
                                      "next": "/holds"})  # fmt: skip
    if login.status_code != 303:
        raise SystemExit(f"the approver could not log in to the console: HTTP {login.status_code} {login.text[:200]}")
    page: dict[str, str] = {}
    merchant = _merchant(stack)

    def load() -> str | None:
        answer = http.get("/holds")
        page["text"] = answer.text
        return None if answer.status_code == 200 else f"HTTP {answer.status_code} {answer.text[:200]}"

    def approve(sik: str) -> Callable[[], str | None]:
        def post() -> str | None:
            fields = _form_of(page.get("text", ""), sik)
            answer = http.post(f"/holds/{merchant}/{sik}/approve", data={**fields, "reason": "flood: checked"})
            return None if answer.status_code in (200, 303) else f"HTTP {answer.status_code} {answer.text[:200]}"
        return post

    timed: list[Callable[[], str | None]] = []
    for sik in siks:
        timed += [load, approve(sik)]
    return timed


async def _held(info: StackInfo, payment: str) -> str:
    async with mcp_client(info.mcp_url, info.token()) as client:
        answer = structured(await client.call_tool("create_refund", {"payment_id": payment, "amount": HELD_AMOUNT}))
    if answer.get("state") != "HELD":
        raise SystemExit(f"a call above the hold threshold was not held: {answer}")
    return str(answer["sik"])


def _merchant(stack: Stack) -> str:
    return str(yaml.safe_load(stack.mandate.read_text(encoding="utf-8"))["merchant_id"])


def _form_of(page: str, sik: str) -> dict[str, str]:
    """The hold's approve form as the page drew it: the CSRF value and its hidden fields."""
    row = page.split(f'id="hold-{sik}"', 1)[-1].split("</tr>", 1)[0]
    fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', row))
    if "csrf" not in fields:
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        if found:
            fields["csrf"] = found.group(1)
    return fields


def summarise(results: list[Timed], *, hostile: int, command: str, seconds: float, max_connections: int) -> str:
    lines = [
        "## Listener flood: every HTTP listener under hostile connections",
        "",
        "Evidence class: **real process** × **sandbox rail**. `interlock up` (supervisord, embedded Redis, sandbox",
        "rail, every actor) in a fresh data directory; one listener at a time flooded from one process trying to "
        f"hold {hostile} hostile",
        "connections open at once, each reopened as soon as the listener closes it (idle; half a request head; a",
        "body trickled a byte a second; a 64 KiB header line; a header repeated without end), while a real client",
        "makes its requests one after another, each timed to its answer: an agent's money call at the ingress (a new",
        "MCP session and `create_refund`), a signed delivery to the webhook receiver, an approver's page load and",
        "approval in the console. \"Held\" is the median count of hostile connections open at once while timed",
        f"(sampled every {SAMPLE_EVERY_S * 1000:.0f} ms). Target: every real request answered, p99 < "
        f"{P99_TARGET_MS} ms, held ≥ {HELD_TARGET}. Each listener's cap:",
        f"INTERLOCK_HTTP_MAX_CONNECTIONS={max_connections} (above the flood, so that it is held rather than evicted;",
        "eviction at the cap is tested with a cap of 12:",
        "tests/interlock/test_listener_guard.py); the deadlines at their defaults (a head in 10 s, a body in 15 s).",
        "",
        f"- command: `{command}`; commit: {commit_id()}; date: {time.strftime('%Y-%m-%d')}; wall time: "
        f"{seconds:.0f} s; machine: {os.cpu_count()} CPUs",
    ]
    for r in results:
        verdict = "PASS" if r.passed() else "FAIL"
        lines.append(f"- **{r.line()}** — {verdict}; fewest held at once {r.fewest}; hostile connections opened "
                     f"{r.opened}, closed by the listener "
                     f"{r.closed}" + (f"; unanswered: {'; '.join(p[:160] for p in r.problems[:3])}"
                                      if r.problems else ""))  # fmt: skip
    return "\n".join(lines)
