"""The sandbox's webhook deliveries (SPEC §17): signed over the raw body, one event id per event, retried until a
2xx, and the delivery faults (drop, duplicate, delay, bad signature). The receiving end here is an in-process
transport: what is checked is what the sandbox sends."""

from __future__ import annotations

import asyncio
import json

import httpx

from sandbox.faults import FaultSet, parse_fault
from sandbox.webhooks import WebhookSender
from webhooks.signature import verify

SECRET = "whsec_sandbox_sender_test_01"
REFUND = {"id": "rfnd_S1", "entity": "refund", "amount": 100, "currency": "INR", "payment_id": "pay_S1",
          "status": "processed", "notes": {"interlock_sik": "S" * 32}}  # fmt: skip
WINDOW_S = 1.5  # how long a delivery that must not come (dropped, or delayed longer) is looked out for


def run(answers: list[int], *faults: dict, events: int = 1, expect: int = 1) -> list[httpx.Request]:
    """Emit *events* refund events and collect every request the sender makes in WINDOW_S, and at least until the
    *expect*-th has come (a busy machine may take longer; a deadline of 60 s only detects one that never comes);
    *answers* are the statuses given in turn (200 once they run out)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(answers.pop(0) if answers else 200)

    async def main() -> None:
        fault_set = FaultSet([parse_fault(f) for f in faults], seed=1)
        sender = WebhookSender("http://receiver.test/webhooks/razorpay", SECRET, "acc_SandboxRail001",
                               faults=fault_set, transport=httpx.MockTransport(answer))  # fmt: skip
        for _ in range(events):
            sender.emit("refund.processed", "refund", REFUND)
        await asyncio.sleep(WINDOW_S)
        deadline = asyncio.get_running_loop().time() + 60
        while len(seen) < expect and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await sender.close()

    asyncio.run(main())
    return seen


def test_a_delivery_is_a_signed_razorpay_event() -> None:
    [request] = run([])
    assert verify(request.content, request.headers["x-razorpay-signature"], [SECRET])
    event = json.loads(request.content)
    assert (event["entity"], event["event"], event["account_id"], event["contains"]) == (
        "event", "refund.processed", "acc_SandboxRail001", ["refund"])
    assert event["payload"]["refund"]["entity"] == REFUND
    assert request.headers["x-razorpay-event-id"].startswith("evt_")


def test_a_failed_delivery_is_made_again_with_the_same_id_and_bytes() -> None:
    first, second = run([503], expect=2)
    assert first.headers["x-razorpay-event-id"] == second.headers["x-razorpay-event-id"]
    assert first.content == second.content


def test_each_event_has_its_own_id() -> None:
    requests = run([], events=3, expect=3)
    assert len({r.headers["x-razorpay-event-id"] for r in requests}) == 3


def test_delivery_faults() -> None:
    assert run([], {"name": "webhook_drop", "rate": 1.0}, expect=0) == []
    twice = run([], {"name": "webhook_duplicate", "rate": 1.0}, expect=2)
    assert len(twice) == 2 and len({r.headers["x-razorpay-event-id"] for r in twice}) == 1
    bad, good = run([401], {"name": "webhook_bad_signature", "rate": 1.0}, expect=2)
    assert not verify(bad.content, bad.headers["x-razorpay-signature"], [SECRET])
    assert verify(good.content, good.headers["x-razorpay-signature"], [SECRET])
    delayed = run([], {"name": "webhook_delay", "rate": 1.0, "params": {"delay_ms": 3000}}, expect=0)
    assert delayed == [], "not yet delivered"


def test_each_event_s_fate_is_journalled_for_a_harness_to_check_the_receiver_against(tmp_path) -> None:
    from sandbox.journal import Journal

    journal = Journal(tmp_path / "journal.sqlite3")
    answers = [503]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(answers.pop(0) if answers else 200)

    async def main() -> list[str]:
        fault_set = FaultSet([parse_fault({"name": "webhook_drop", "rate": 1.0})], seed=1)
        sender = WebhookSender("http://receiver.test/webhooks/razorpay", SECRET, "acc_SandboxRail001",
                               transport=httpx.MockTransport(answer), journal=journal)  # fmt: skip
        kept = sender.emit("refund.created", "refund", REFUND)
        sender.faults = fault_set
        lost = sender.emit("refund.processed", "refund", REFUND)
        await asyncio.sleep(1.0)  # the first answer is 503: delivered on the retry after 0.5 s
        await sender.close()
        return [kept, lost]

    kept, lost = asyncio.run(main())
    events = [(e["kind"], e["detail"]) for e in journal.export()["events"]]
    journal.close()
    assert events == [
        ("webhook_emitted", {"event_id": kept, "event": "refund.created", "entity_id": "rfnd_S1", "dropped": False,
                             "copies": 1}),
        ("webhook_emitted", {"event_id": lost, "event": "refund.processed", "entity_id": "rfnd_S1", "dropped": True,
                             "copies": 0}),
        ("webhook_delivered", {"event_id": kept, "attempts": 2}),
    ]  # fmt: skip
