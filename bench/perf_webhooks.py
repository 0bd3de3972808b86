"""Time to definite after an ambiguous refund, with webhooks and by polling only (issue 27, item 2).

One stack as real processes, with the webhook receiver, and a sandbox that delivers Razorpay-format webhooks to
it. Agents make refunds the rail applies and then answers 504 (`ambiguous_504`, rate 1), and repeat the same call
every 100 ms (what RETRY_SAME_CALL tells them) until the answer is definite, as in bench.perf_ttd. Two rounds in
one run: webhooks delivered (half of them twice, `webhook_duplicate` 0.5, so the receiver's de-duplication is
exercised), and every delivery dropped (`webhook_drop` 1: what polling alone gives). Then forged deliveries
(signed with a wrong secret) are posted to the receiver, which must refuse each. The event, duplicate and refusal
counts are the receiver's inbox's own.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.perf_report import definite_table
from bench.perf_rig import PerfRig
from bench.perf_trace import Definite, definite_stats
from bench.perf_ttd import follow_round
from interlock.ports import free_port, port_in_use
from interlock.results import commit_id
from ledger import webhook_inbox

SECRET = "whsec_bench_perf_webhooks_0001"
ROUNDS = (
    ("webhooks", [{"name": "ambiguous_504", "rate": 1.0}, {"name": "webhook_duplicate", "rate": 0.5}]),
    ("polling only", [{"name": "ambiguous_504", "rate": 1.0}, {"name": "webhook_drop", "rate": 1.0}]),
)
SETTLE_S = 3.0  # after the last round: late and repeated deliveries land before the inbox is counted


@dataclass(frozen=True)
class WebhookReport:
    samples: list[Definite]
    events: int
    duplicates: int
    forged_sent: int
    forged_refused: int
    load: tuple[float, float]


def run_webhooks(base: Path, calls: int, forged: int, echo: Callable[[str], None] = print) -> WebhookReport:
    rig = PerfRig(base, gate_workers=2)
    inbox = rig.stack.data_dir / "webhooks.sqlite3"
    port = free_port()
    url = f"http://127.0.0.1:{port}/webhooks/razorpay"
    rig.stack.env.update({"INTERLOCK_WEBHOOK_SECRETS": SECRET, "INTERLOCK_WEBHOOK_INBOX": str(inbox),
                          "INTERLOCK_SANDBOX_WEBHOOK_URL": url})  # fmt: skip
    rig.stack.data_dir.mkdir(parents=True, exist_ok=True)
    receiver = rig.stack.start_actor("webhooks", ["webhooks", "--host", "127.0.0.1", "--port", str(port)])
    samples: list[Definite] = []
    try:
        rig.start()
        deadline = time.monotonic() + 30
        while not port_in_use(port):
            if time.monotonic() > deadline or not receiver.alive():
                raise RuntimeError(f"the webhook receiver did not listen:\n{receiver.log()[-2000:]}")
            time.sleep(0.05)
        for label, faults in ROUNDS:
            mine = follow_round(rig, label, faults, calls)
            samples += mine
            echo(f"time to definite, {label}: ms {sorted(round(s.ms) for s in mine if s.ms is not None)}")
        refused = sum(_forge(url, i) == 401 for i in range(forged))
        time.sleep(SETTLE_S)
        conn = webhook_inbox.open_inbox(inbox)
        try:
            counts = webhook_inbox.counts(conn)
        finally:
            conn.close()
        load = _load()
    finally:
        rig.stop()
    return WebhookReport(samples, counts["events"], counts["duplicates"], forged, refused, load)


def _forge(url: str, i: int) -> int:
    """A delivery signed with a secret the receiver does not hold: it must be refused, and store nothing."""
    body = json.dumps({"entity": "event", "account_id": "acc_SandboxRail001", "event": "refund.processed",
                       "contains": ["refund"], "payload": {"refund": {"entity": {"id": f"rfnd_Forged{i:09d}",
                       "entity": "refund", "amount": 10_000, "currency": "INR", "payment_id": "pay_perf1",
                       "status": "processed"}}}, "created_at": int(time.time())}).encode()  # fmt: skip
    signature = hmac.new(b"forged-secret-not-configured", body, hashlib.sha256).hexdigest()
    headers = {"X-Razorpay-Signature": signature, "x-razorpay-event-id": f"evt_forged{i}"}
    answer = httpx.post(url, content=body, timeout=10, headers=headers)
    return answer.status_code


def _load() -> tuple[float, float]:
    one, five, _ = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five)


def headline(report: WebhookReport) -> str:
    stats = {s.fault: s for s in definite_stats(report.samples)}

    def p50(label: str) -> str:
        stat = stats.get(label)
        return "n/a" if stat is None or not stat.definite else f"{stat.p50_ms:.0f}"

    hooks, polling = p50("webhooks"), p50("polling only")
    return (f"webhooks: time-to-definite p50 {hooks} ms (polling only: {polling} ms); {report.events} "
            f"events, {report.duplicates} duplicates ignored, {report.forged_refused} forged refused")  # fmt: skip


def render(report: WebhookReport, *, command: str) -> str:
    stats = definite_stats(report.samples)
    commit = commit_id()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Webhooks: time to definite after an ambiguous refund",
        "",
        f"Evidence: **real process** (sandbox rail delivering signed webhooks, the webhook receiver, Redis, 2 gate "
        f"workers, 1 rail worker, reconciler reading the inbox, HTTP ingress — each its own process), **sandbox "
        f"rail** (local, not Razorpay), **scripted agent** (MCP clients repeating the same call every 100 ms). "
        f"Commit `{commit}`, {when}, load average {report.load[0]:.2f} / {report.load[1]:.2f} (1 / 5 min) when the "
        f"run ended. Reproduce: `{command}`.",
        "",
        f"**{headline(report)}**",
        "",
        "Every refund below was applied by the rail and answered 504 (`ambiguous_504`, rate 1). *webhooks*: the "
        "sandbox delivers `refund.created` and `refund.processed` (half of the events twice); the reconciler "
        "settles the intent from the stamped entity (WEBHOOK_APPLIED). *polling only*: every delivery dropped; the "
        "reconciler reads the rail's list after its min delay (2 s by default). Agent: first ambiguous answer → "
        "first definite answer. Ledger: UNKNOWN recorded → definite state recorded.",
        "",
    ]
    lines += definite_table(stats, first="round")
    lines += [
        "",
        f"Receiver inbox after the run: {report.events} events stored, {report.duplicates} repeated deliveries "
        f"counted and ignored; {report.forged_refused} of {report.forged_sent} forged deliveries (wrong secret) "
        "refused 401, none stored.",
        "",
    ]
    return "\n".join(lines)
