"""Chaos: the webhook receiver SIGKILLed mid-delivery, and the money followed to the bank's final word (issue 27).

One trial: a fresh stack of real processes with the webhook receiver, and a sandbox that delivers signed
webhooks to it and (but for the `ambiguous_504` cells) moves each entity through its lifecycle
(INTERLOCK_SANDBOX_LIFECYCLE_MS) to the cell's fault. The money call is applied by the rail and answered 504, so
either a webhook or the list-paging reconciler settles it. The receiver SIGKILLs itself on its first delivery, at
`webhooks.before_commit` (the inbox row written, not committed) or `webhooks.after_store_before_ack` (committed,
not answered); it is restarted and the sandbox delivers again, as Razorpay retries.

What must hold, besides the kill matrix's checks (never two entities, the intent settled, APPLIED ⇔ the stamped
entity, the audit chain intact): the kill landed; every event the sandbox delivered is in the inbox exactly once
and no other event of ours is, and the one acknowledged by no one was stored once (`before_commit`: by the retry;
`after_store_before_ack`: by the first delivery, the retry counted as a duplicate); the intent stays APPLIED
while its `rail_status` reaches the rail's own final status; a person is asked to decide exactly where the fault
needs one (a refund the bank failed, a reversed settlement), by `interlock_status` too (ESCALATE_TO_OPERATOR);
and then four forged deliveries — a wrong signature, an accepted event id replayed with the other final status,
another merchant's stamp, another rail account — are read by the reconciler and change nothing.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from chaos.cells import Cell
from chaos.trial import (
    MANDATE,
    TOKEN,
    TrialResult,
    _call,
    _observe_all,
    _settle_all,
    died_at,
    ledger_rows,
    one_money_call,
    run_trial,
)
from chaos.verdict import judge
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.stack import Stack, StackError, wait_for
from interlock.ports import free_port, port_in_use
from interlock.sik import SIK_LENGTH
from ledger import lifecycle, webhook_inbox

SECRET = "whsec_chaos_webhooks_0001"
ACCOUNT = "acc_ChaosRail000001"
OTHER_ACCOUNT = "acc_OtherMerchant1"
PATH = "/webhooks/razorpay"  # SPEC §17
# What the rail ends at under each fault, and the attention a person must give it (None: nobody needs to).
EXPECTED: dict[str, tuple[str, str | None]] = {
    "ambiguous_504": ("processed", None),
    "refund_bank_failure": ("failed", lifecycle.REFUND_FAILED),
    "settlement_partial": ("processed", None),
    "settlement_reversed": ("reversed", lifecycle.SETTLEMENT_REVERSED),
}
# The other final status a forged event claims, per the final status the rail reached.
OPPOSITE = {"processed": "failed", "failed": "processed", "reversed": "processed"}
FINAL_WAIT_S = 45  # the lifecycle runs L (1.5 s) past the call, 2L for a partial settlement, plus redeliveries


def run_webhook_trial(cell: Cell, trial: int, seed: int, base: Path, *, mutation: str | None = None,
                      keep: bool = False, proxy: bool = False) -> TrialResult:  # fmt: skip
    if proxy:
        raise ValueError("the webhook cells run against the sandbox's REST rail only")
    return run_trial(cell, trial, seed, base, mutation=mutation, keep=keep, body=_run)


def _run(stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *, proxy: bool) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}{PATH}"
    inbox = stack.data_dir / "webhooks.sqlite3"
    stack.env.update({"INTERLOCK_WEBHOOK_SECRETS": SECRET, "INTERLOCK_WEBHOOK_INBOX": str(inbox),
                      "INTERLOCK_SANDBOX_WEBHOOK_URL": url, "INTERLOCK_RAIL_ACCOUNT_ID": ACCOUNT,
                      "INTERLOCK_MANDATE": str(_mandate_on_account(stack.data_dir))})  # fmt: skip
    stack.start_redis()
    sandbox_url = stack.start_sandbox(seed=seed)
    control = SandboxControl(sandbox_url, stack.env["INTERLOCK_RAIL_KEY_ID"], stack.env["INTERLOCK_RAIL_KEY_SECRET"])
    receiver_args = ["webhooks", "--host", "127.0.0.1", "--port", str(port)]
    receiver = stack.start_actor("webhooks", receiver_args, kill_at=cell.point)
    ingress = stack.start_ingress(tokens_file=tokens, wait=False)
    stack.start_engine()
    stack.wait_for_ingress()
    wait_for(lambda: port_in_use(port), timeout=30, what="the webhook receiver to listen", actor=receiver)
    subject, arguments = one_money_call(control, cell.tool, f"pay_chaoswh{seed}")
    control.set_faults(cell.faults, seed=seed)
    first = asyncio.run(_call(ingress, arguments, cell.tool))
    result.first_answer = first.get("state") or first.get("error", "?")
    control.set_faults([f for f in cell.faults if f["name"] != "ambiguous_504"])  # the agent's retry is answered
    result.kill_landed = died_at(receiver, cell.point, timeout_s=20)
    if not result.kill_landed:
        result.violations.append(f"KILL_NOT_LANDED: the receiver did not die at {cell.point} on its first delivery")
    stack.start_actor("webhooks", receiver_args)
    wait_for(lambda: port_in_use(port), timeout=30, what="the restarted webhook receiver to listen")
    final, attention = EXPECTED[cell.fault]
    _settle_all(stack, [subject])
    followed = _wait_final(stack, subject)
    result.after_recovery = _observe(stack, control, subject, result, "after recovery")
    _delivered_all(control)
    for violation in _check_inbox(inbox, control, cell.point):
        result.violations.append(f"after recovery: {violation}")
    for violation in _check_lifecycle(stack, control, subject, followed, final, attention):
        result.violations.append(f"after recovery: {violation}")
    if followed is not None:
        told = asyncio.run(_status(ingress, followed.sik))
        want = "ESCALATE_TO_OPERATOR" if attention else None
        said = told.get("caller_action")
        result.webhook["told"] = f"{told.get('state')}/{(told.get('rail_status') or {}).get('status')}/{said}"
        if (said == "ESCALATE_TO_OPERATOR") != (want is not None):
            result.violations.append(f"AGENT_NOT_TOLD: interlock_status answered {told} for a {final} "
                                     f"{cell.tool} (attention {attention})")  # fmt: skip
        forged = _forge_and_check(stack, inbox, url, followed)
        result.webhook["forged"] = forged.pop("refused")
        result.violations += [f"forged: {v}" for v in forged["violations"]]
    # The agent repeats its same call: the answer is the one intent, never a second entity.
    again = asyncio.run(_call(ingress, arguments, cell.tool))
    result.after_retry = f"{again.get('state') or again.get('error', '?')}; " + _observe(
        stack, control, subject, result, "after retry")
    control.close()


def _mandate_on_account(data: Path) -> Path:
    """The example mandate, naming the rail account the sandbox's webhooks name (ADR 0021): an event is evidence
    only on that account."""
    mandate = yaml.safe_load(MANDATE.read_text(encoding="utf-8"))
    mandate["rail"] = {**(mandate.get("rail") or {}), "account_id": ACCOUNT}
    path = data / "mandate.yaml"
    path.write_text(yaml.safe_dump(mandate), encoding="utf-8")
    return path


async def _status(url: str, sik: str) -> dict[str, Any]:
    async with mcp_client(url, TOKEN, timeout_s=30) as client:
        return structured(await client.call_tool("interlock_status", {"sik": sik}))


def _observe(stack: Stack, control: SandboxControl, subject: str, result: TrialResult, moment: str) -> str:
    obs = _observe_all(stack, control, [subject])
    result.violations += [f"{moment}: {v}" for v in judge(obs)]
    return obs.summary()


def _followed(stack: Stack, subject: str) -> lifecycle.RailStatus | None:
    rows = ledger_rows(stack, f"SELECT {lifecycle._COLUMNS} FROM rail_status WHERE sik IN "
                              "(SELECT sik FROM intents WHERE subject_id = ?)", (subject,))  # fmt: skip
    return lifecycle.RailStatus.from_row(tuple(rows[0].values())) if rows else None


def _wait_final(stack: Stack, subject: str) -> lifecycle.RailStatus | None:
    """The intent's rail_status once final (or as it stands when FINAL_WAIT_S has passed)."""
    deadline = time.monotonic() + FINAL_WAIT_S
    while True:
        seen = _followed(stack, subject)
        if (seen is not None and seen.final) or time.monotonic() > deadline:
            return seen
        time.sleep(0.25)


def _journal_events(control: SandboxControl, *kinds: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = control._call("GET", "/__sandbox/journal")["events"]
    return [e["detail"] for e in events if e["kind"] in kinds]


def _delivered_all(control: SandboxControl, timeout_s: float = 30) -> None:
    """Wait until every event the sandbox emitted and did not drop is delivered or given up (a deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sent = {e["event_id"] for e in _journal_events(control, "webhook_emitted") if not e["dropped"]}
        done = {e["event_id"] for e in _journal_events(control, "webhook_delivered", "webhook_given_up")}
        if sent <= done:
            return
        time.sleep(0.25)


def _inbox_rows(inbox: Path) -> list[dict[str, Any]]:
    conn = webhook_inbox.open_inbox(inbox)
    try:
        return [{"rowid": r[0], "event_id": r[1], "event": r[2], "deliveries": r[3], "body": bytes(r[4]),
                 "processed_at": r[5]} for r in conn.execute(
            "SELECT rowid, event_id, event, deliveries, body, processed_at FROM webhook_events ORDER BY rowid")]
    finally:
        conn.close()


def _check_inbox(inbox: Path, control: SandboxControl, point: str) -> list[str]:
    emitted = {e["event_id"]: e for e in _journal_events(control, "webhook_emitted")}
    delivered = {e["event_id"]: e["attempts"] for e in _journal_events(control, "webhook_delivered")}
    given_up = [e["event_id"] for e in _journal_events(control, "webhook_given_up")]
    rows = {r["event_id"]: r for r in _inbox_rows(inbox)}
    problems = []
    if given_up:
        problems.append(f"WEBHOOK_GIVEN_UP: the sandbox gave up delivering {given_up}")
    lost = sorted(set(delivered) - set(rows))
    if lost:
        problems.append(f"WEBHOOK_LOST: acknowledged deliveries not in the inbox: {lost}")
    strange = sorted(set(rows) - set(emitted))
    if strange:
        problems.append(f"WEBHOOK_INVENTED: inbox events the sandbox never sent: {strange}")
    # The delivery (or deliveries: they run concurrently) the receiver died on were answered by no one: each was
    # delivered again. before_commit: rolled back, so stored by a retry; after_store_before_ack: stored by the
    # first delivery, so a retry was counted as a duplicate.
    retried = sorted(e for e, attempts in delivered.items() if attempts >= 2)
    if not retried:
        problems.append(f"WEBHOOK_NOT_REDELIVERED: no delivery needed a second attempt after the kill at {point}")
    elif point == "webhooks.after_store_before_ack" and not any(rows[e]["deliveries"] >= 2 for e in retried
                                                                 if e in rows):
        problems.append(f"WEBHOOK_NOT_STORED_FIRST: none of {retried} was stored before the kill at {point}")
    unprocessed = sorted(e for e, r in rows.items() if r["processed_at"] is None)
    if unprocessed:
        problems.append(f"WEBHOOK_UNREAD: events of ours the reconciler has not acted on: {unprocessed}")
    return problems


def _check_lifecycle(stack: Stack, control: SandboxControl, subject: str, followed: lifecycle.RailStatus | None,
                     final: str, attention: str | None) -> list[str]:  # fmt: skip
    intents = ledger_rows(stack, "SELECT state, rail_entity_id FROM intents WHERE subject_id = ?", (subject,))
    if [i["state"] for i in intents] != ["APPLIED"]:
        return [f"NOT_APPLIED: the intents on {subject} are {intents}, one APPLIED expected"]
    if followed is None or not followed.final or followed.status != final:
        got = "nothing" if followed is None else f"{followed.status} (final: {followed.final})"
        return [f"LIFECYCLE_NOT_FOLLOWED: rail_status is {got}; the rail says {final}"]
    problems = []
    entity = next((r["entity"] for r in control.entities() if r["entity"]["id"] == followed.entity_id), None)
    if entity is None or entity.get("status") != final:
        problems.append(f"LIFECYCLE_NOT_THE_RAIL_S: rail_status {followed.status}, the rail's entity {entity}")
    if followed.attention != attention:
        problems.append(f"ATTENTION_WRONG: rail_status attention {followed.attention}, expected {attention}")
    needing = ledger_rows(stack, "SELECT COUNT(*) AS n FROM rail_status WHERE attention IS NOT NULL")[0]["n"]
    faulted = [e for e in _journal_events(control, "lifecycle_fault")
               if e["fault"] in ("refund_bank_failure", "settlement_reversed")]
    if needing != len(faulted):
        problems.append(f"ATTENTION_COUNT: {needing} rows need a person, the sandbox failed or reversed "
                        f"{len(faulted)} entities")  # fmt: skip
    return problems


def _sign(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _event(event: str, entity: dict[str, Any], *, account: str = ACCOUNT) -> bytes:
    key = "refund" if entity.get("entity") == "refund" else "settlement.ondemand"
    return json.dumps({"entity": "event", "account_id": account, "event": event, "contains": [key],
                       "payload": {key: {"entity": entity}}, "created_at": int(time.time())}).encode()  # fmt: skip


def _forge_and_check(stack: Stack, inbox: Path, url: str, followed: lifecycle.RailStatus) -> dict[str, Any]:
    """Post four forged deliveries about the followed entity and check, once the reconciler has read past them,
    that the intent, its rail_status and its history are as they were."""
    before_intents = ledger_rows(stack, "SELECT * FROM intents WHERE sik = ?", (followed.sik,))
    before_history = ledger_rows(stack, "SELECT * FROM rail_status_history WHERE sik = ?", (followed.sik,))
    rows = _inbox_rows(inbox)
    ours = next((r for r in rows if json.loads(r["body"]).get("account_id") == ACCOUNT), None)
    kind = "refund" if followed.tool == "create_refund" else "settlement"
    lie = OPPOSITE[followed.status]
    entity = {**json.loads(json.dumps(_entity_of(rows, followed.entity_id))), "status": lie}
    other_sik = base64.b32encode(hashlib.sha256(b"another merchant's intent").digest()).decode()[:SIK_LENGTH]
    stranger = {**entity, "id": entity["id"][:-4] + "Frgd", "notes": {"interlock_sik": other_sik}}
    if "receipt" in stranger:
        stranger["receipt"] = f"ilk_{other_sik}"
    forged = [
        ("wrong_signature", 401, _event(f"{kind}.{lie}", entity), "evt_forged_sig", "not-" + SECRET),
        ("replayed_event_id", 200, _event(f"{kind}.{lie}", entity), ours["event_id"] if ours else "evt_none", SECRET),
        ("another_merchant", 200, _event(f"{kind}.{lie}", stranger), "evt_forged_stamp", SECRET),
        ("another_account", 200, _event(f"{kind}.{lie}", entity, account=OTHER_ACCOUNT), "evt_forged_acct", SECRET),
    ]
    violations: list[str] = []
    refused = 0
    with httpx.Client(timeout=10) as http:
        for name, status, body, event_id, secret in forged:
            answer = http.post(url, content=body, headers={"X-Razorpay-Signature": _sign(body, secret),
                                                           "x-razorpay-event-id": event_id})  # fmt: skip
            if answer.status_code != status:
                violations.append(f"{name}: answered {answer.status_code}, {status} expected")
            elif name == "wrong_signature" or answer.json().get("status") == "duplicate":
                refused += 1
    last = max(r["rowid"] for r in _inbox_rows(inbox))
    try:
        wait_for(lambda: _readers_past(inbox, last), timeout=20, what="the reconciler to read the forged events")
    except StackError as exc:
        violations.append(str(exc))
    after = {r["event_id"]: r for r in _inbox_rows(inbox)}
    if "evt_forged_sig" in after:
        violations.append("wrong_signature: stored in the inbox")
    if ours is not None and after[ours["event_id"]]["body"] != ours["body"]:
        violations.append("replayed_event_id: the inbox's first body was replaced")
    if ledger_rows(stack, "SELECT * FROM intents WHERE sik = ?", (followed.sik,)) != before_intents:
        violations.append("the intent changed")
    if ledger_rows(stack, "SELECT * FROM rail_status_history WHERE sik = ?", (followed.sik,)) != before_history:
        violations.append("the rail_status history changed")
    now = _followed_by_sik(stack, followed.sik)
    if now is None or (now.status, now.attention) != (followed.status, followed.attention):
        violations.append(f"rail_status changed: {followed.status}/{followed.attention} -> {now}")
    if ledger_rows(stack, "SELECT sik FROM intents WHERE sik = ?", (other_sik,)):
        violations.append("another_merchant: an intent appeared for the stranger's stamp")
    return {"violations": violations, "refused": f"{refused} refused, {len(forged) - refused} stored and ignored"}


def _entity_of(rows: list[dict[str, Any]], entity_id: str) -> dict[str, Any]:
    for row in rows:
        payload = json.loads(row["body"]).get("payload", {})
        for wrapped in payload.values():
            if isinstance(wrapped, dict) and wrapped.get("entity", {}).get("id") == entity_id:
                entity: dict[str, Any] = wrapped["entity"]
                return entity
    raise StackError(f"no event in the inbox carries {entity_id}")


def _followed_by_sik(stack: Stack, sik: str) -> lifecycle.RailStatus | None:
    rows = ledger_rows(stack, f"SELECT {lifecycle._COLUMNS} FROM rail_status WHERE sik = ?", (sik,))
    return lifecycle.RailStatus.from_row(tuple(rows[0].values())) if rows else None


def _readers_past(inbox: Path, rowid: int) -> bool:
    conn = webhook_inbox.open_inbox(inbox)
    try:
        cursors = [int(r[0]) for r in conn.execute("SELECT last_rowid FROM webhook_readers")]
    finally:
        conn.close()
    return bool(cursors) and min(cursors) >= rowid
