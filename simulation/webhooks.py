"""Razorpay's webhooks in the simulation (SPEC §17, ADR 0027): every status the simulated rail gives an entity
becomes a signed event, delivered to the real receiver's judging (`webhooks.receiver.Receiver.judge`: signature,
event id, the inbox's store) and read by the real inbox reader in the reconciler's process.

Razorpay's sender is not ours and never crashes; our receiver is a process like the others, crashed or paused by
the seed's faults (also between storing an event and answering it), and a delivery it does not answer is tried
again with backoff, as Razorpay does for 24 hours.
Per seed, deliveries are late (which reorders them), sent twice, or lost for good, and forged ones are mixed in:
signed with a wrong secret, a real event's body with its terms changed under its own signature, and — where the
deployment names its rail account — an event of another account signed with the right secret. None of them may
ever be evidence; the checker's LEDGER_RAIL and TOLD_APPLIED rules say so from the rail's journal.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulation.scheduler import LOST, Process, Scheduler
from webhooks.receiver import Receiver

if TYPE_CHECKING:
    from simulation.workload import Workload
    from simulation.world import World

SECRET = "whsec_simulated_0123456789"  # the deployment's: at least 16 characters (webhooks/signature.py)
FORGER = "whsec_not_ours_987654321"
PAYLOAD_KEYS = {"refund": "refund", "settlement.ondemand": "settlement.ondemand", "payout": "payout"}
PAYOUT_EVENTS = {"pending": "payout.pending", "queued": "payout.queued", "processing": "payout.initiated",
                 "processed": "payout.processed", "failed": "payout.failed", "reversed": "payout.reversed",
                 "rejected": "payout.rejected", "cancelled": "payout.updated"}  # fmt: skip
RETRY_MS = (2_000, 60_000)  # Razorpay's retries of an unanswered delivery: from seconds, backing off


@dataclass
class WebhookPlan:
    """How the seed's webhooks are delivered."""

    on: bool = False
    lost: float = 0.0  # never delivered
    duplicate: float = 0.0  # delivered twice, the same event id
    delay_ms: int = 0  # each delivery up to this late (so they arrive out of order)
    forged: float = 0.0  # per real event, a forged one beside it
    other_account: bool = False  # forgeries may name another rail account (the deployment names its own)


@dataclass
class _Delivery:
    event_id: str
    body: bytes
    signature: str
    due_ms: int
    tries: int = 0


@dataclass
class SimWebhooks:
    """One shard's rail account's webhooks: emitted by the simulated rail, delivered to the shard's receiver."""

    sched: Scheduler
    shard: str
    account_id: str
    plan: WebhookPlan
    inbox: Path
    queue: list[_Delivery] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)  # every real event emitted: the checker's evidence
    stored: int = 0  # deliveries the receiver stored (accepted): the inbox's reader wakes on it
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def emit(self, kind: str, entity: dict[str, Any], status: str) -> None:
        """The rail changed *entity*: the event Razorpay sends for it now (Razorpay's names, the sandbox's for an
        instant settlement, which Razorpay does not document)."""
        if not self.plan.on:
            return
        if kind == "payout":
            name = PAYOUT_EVENTS[status]
        elif kind == "refund":
            name = f"refund.{status if status in ('processed', 'failed') else 'created'}"
        else:
            name = f"settlement.{status}"
        key = PAYLOAD_KEYS["settlement.ondemand" if kind == "settlement" else kind]
        body = self._body(name, key, dict(entity), self.account_id)
        event_id = f"evt_{self.shard}_{next(self._ids):08d}"
        self.sent.append({"event_id": event_id, "event": name, "entity_id": entity["id"]})
        rng = self.sched.rng
        if rng.random() < self.plan.lost:
            self.sched.counters.fault("webhook_lost")
        else:
            copies = 2 if rng.random() < self.plan.duplicate else 1
            if copies == 2:
                self.sched.counters.fault("webhook_duplicated")
            for _ in range(copies):
                self._queue(event_id, body, _sign(body, SECRET))
        if rng.random() < self.plan.forged:
            self._forge(name, key, dict(entity), body)

    def _forge(self, name: str, key: str, entity: dict[str, Any], body: bytes) -> None:
        rng = self.sched.rng
        kinds = ["wrong_secret", "tampered"] + (["other_account"] if self.plan.other_account else [])
        kind = rng.choice(kinds)
        self.sched.counters.fault(f"webhook_forged_{kind}")
        event_id = f"evt_{self.shard}_{next(self._ids):08d}"
        if kind == "wrong_secret":
            # Someone who knows a stamp claims the call was applied, on its terms, under another entity id.
            entity["id"] = f"{entity['id']}x"
            fake = self._body(name, key, entity, self.account_id)
            self._queue(event_id, fake, _sign(fake, FORGER))
        elif kind == "tampered":
            entity["amount"] = int(entity.get("amount") or entity.get("amount_requested") or 0) + 100
            self._queue(event_id, self._body(name, key, entity, self.account_id), _sign(body, SECRET))
        else:  # another account's entity carrying this stamp, signed with the secret both accounts' webhooks use
            entity["id"] = f"{entity['id']}o"
            other = self._body(name, key, entity, f"{self.account_id}_other")
            self._queue(event_id, other, _sign(other, SECRET))

    def _body(self, name: str, key: str, entity: dict[str, Any], account_id: str) -> bytes:
        return json.dumps({"entity": "event", "account_id": account_id, "event": name, "contains": [key],
                           "payload": {key: {"entity": entity}}, "created_at": self.sched.clock.now_ms() // 1000},
                          separators=(",", ":")).encode("utf-8")  # fmt: skip

    def _queue(self, event_id: str, body: bytes, signature: str) -> None:
        late = self.sched.rng.randint(0, self.plan.delay_ms) if self.plan.delay_ms else 0
        self.queue.append(_Delivery(event_id, body, signature, self.sched.clock.mono_ms + late))

    # -- our receiver, one process of the shard, answering Razorpay's deliveries --------------------------------

    def serve(self, proc: Process) -> None:
        """The receiver process: take each delivery as it comes due, oldest first, and answer it. One it does not
        answer (crashed or paused before the answer left, or a 5xx) stays queued and comes again later, as
        Razorpay retries; a killed receiver may have stored the event already, and then says `duplicate`."""
        receiver = Receiver(self.inbox, [SECRET], rate_per_second=1_000)
        proc.on_crash.append(receiver.close)
        while not proc.name.startswith(LOST):  # Razorpay delivers to the shard's address, not to a lost machine
            now = self.sched.clock.mono_ms
            due = sorted((d for d in self.queue if d.due_ms <= now), key=lambda d: d.due_ms)
            if not due:
                if self.queue:
                    self.sched.sleep(max(min(d.due_ms for d in self.queue) - now, 1))
                else:
                    self.sched.wait(lambda: bool(self.queue), None)
                continue
            delivery = due[0]
            self.sched.point(f"webhook.receive {delivery.event_id}")
            answer = receiver.judge(delivery.body, delivery.signature, delivery.event_id)
            status = answer.status_code
            self.stored += status == 200 and b'"accepted"' in answer.body
            self.sched.point(f"webhook.answer {delivery.event_id} {status}")
            if status < 500 or delivery.tries >= 30:
                self.queue.remove(delivery)  # answered (a 4xx is final: Razorpay does not retry a refusal)
            else:
                delivery.tries += 1
                delivery.due_ms = self.sched.clock.mono_ms + min(RETRY_MS[0] * 2 ** delivery.tries, RETRY_MS[1])


def _sign(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def install_webhooks(world: World, w: Workload, seed: int) -> None:
    """Webhooks configured on every shard (a secret, an inbox beside the ledger), with the seed's delivery faults:
    the receiver a process of the shard, the reconciler reading the inbox (as `interlock up` runs them)."""
    rng = random.Random(f"webhooks:{seed}")
    plan = WebhookPlan(on=True, lost=rng.choice((0.0, 0.05, 0.3)), duplicate=rng.choice((0.0, 0.2)),
                       delay_ms=rng.choice((0, 2_000, 30_000)), forged=rng.choice((0.0, 0.1, 0.3)),
                       other_account=w.account)  # fmt: skip
    world.faults.rail.other_terms_answer_lost = 0.5  # a stamped entity on other terms, seen first by its webhook
    for shard in world.shards.values():
        inbox = shard.ledger_path.parent / f"webhooks-{shard.name}.sqlite3"
        shard.settings = shard.settings.model_copy(update={"webhook_secrets": SECRET, "webhook_inbox": inbox})
        hooks = SimWebhooks(world.sched, shard.name, shard.rail.merchant_id, plan, inbox)
        shard.rail.events = hooks.emit
        world.webhooks[shard.name] = hooks
