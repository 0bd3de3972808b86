"""Webhooks as a second source of truth (SPEC §17, §18; ADR 0027): a shard's reconciler reads the webhook inbox.

Each accepted event whose refund, instant settlement or RazorpayX payout carries our stamp (notes.interlock_sik, or
"ilk_"+SIK in a refund's receipt or a payout's reference_id) for an intent on this shard's ledger becomes a sighting
on that ledger — the entity as the rail stated it, audit-chained — and settles the intent through
`intents.settle_from_evidence`, the rule an attempt's kept answer goes by: on the intent's terms, WEBHOOK_APPLIED →
APPLIED from UNKNOWN, RECONCILING, an AUTHORIZED retry not yet sent, CONFIRMED_NOT_APPLIED or FAILED_TERMINAL; on
other terms, QUARANTINED (ADR 0016). An intent whose attempt is still out (IN_FLIGHT) is watched: the sighting
settles it as soon as that attempt's answer leaves it UNKNOWN. The rail worker reads sightings too before it sends a
retry, so a retry the list reader authorized on a lagging list is not sent once a webhook has shown the first call
landed.

Never the other way: no event, and no missing event, is evidence that something did not happen. The list-paging
reconciler stays the only authority for "not applied".

An event is evidence only where it names the rail account the intent's money moves on (when the deployment names
one, ADR 0021): the signature says Razorpay sent it, the account says whose entity it is. Several shards read one
inbox, each with its own cursor; an event is marked processed by the shard that holds its SIK (a SIK is derived
from its merchant, so at most one does), or by any reader when it carries no stamp of ours.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interlock.clock import now_ms
from interlock.errors import LedgerError
from interlock.mandate import REFUND_TOOL
from interlock.sik import stamped_siks
from ledger import intents, sightings, webhook_inbox
from ledger.db import transaction
from ledger.intents import Intent
from ledger.queries import PAYOUT_TOOL, SETTLEMENT_TOOL
from ledger.states import State

logger = logging.getLogger(__name__)

# Where a Razorpay event carries each entity we stamp: (payload key, the entity's "entity" field, our tool).
_ENTITIES = (
    ("refund", "refund", REFUND_TOOL),
    ("settlement.ondemand", "settlement.ondemand", SETTLEMENT_TOOL),
    ("settlement", "settlement.ondemand", SETTLEMENT_TOOL),
    ("payout", "payout", PAYOUT_TOOL),  # every payout.* event (SPEC §18), payout.updated included
)
# States in which a sighting may still come to settle the intent: its attempt is out, or it is unsettled.
_MAY_SETTLE = (State.IN_FLIGHT, State.UNKNOWN, State.RECONCILING, State.AUTHORIZED, State.CONFIRMED_NOT_APPLIED,
               State.FAILED_TERMINAL)  # fmt: skip
CATCH_UP_MS = 7 * 86_400_000  # Razorpay replays events up to 7 days back: a restarted reader looks as far


@dataclass(frozen=True, slots=True)
class Evidence:
    tool: str
    entity: dict[str, Any]
    entity_id: str
    status: str | None
    siks: tuple[str, ...]


def stamped_entity(body: bytes) -> Evidence | None:
    """The refund, instant settlement or payout an event carries, with the SIKs its stamp names; None when it
    carries no entity of ours (another kind of event, or an entity without our stamp)."""
    try:
        event = json.loads(body)
    except ValueError:
        return None
    payload = event.get("payload") if isinstance(event, dict) else None
    if not isinstance(payload, dict):
        return None
    for key, kind, tool in _ENTITIES:
        wrapped = payload.get(key)
        entity = wrapped.get("entity") if isinstance(wrapped, dict) else None
        if not (isinstance(entity, dict) and entity.get("entity") == kind and isinstance(entity.get("id"), str)):
            continue
        siks = stamped_siks(entity)
        status = entity.get("status")
        return Evidence(tool, entity, entity["id"], status if isinstance(status, str) else None, siks) \
            if siks else None  # fmt: skip
    return None


@dataclass
class InboxReader:
    ledger: sqlite3.Connection
    inbox: sqlite3.Connection
    reader: str  # this reader's cursor in the inbox: one per shard
    owner: str  # the actor named on the audit chain
    # The rail account an intent's money moves on (None: the deployment names none, so it is not checked).
    account_of: Callable[[Intent], str | None] = lambda intent: None
    clock: Callable[[], int] = now_ms
    # Told of each new sighting (the lifecycle follower, reconciler/lifecycle.py): merchant, SIK, evidence, event id.
    # Told once, after the sighting's commit: if the telling fails, the follower's own step takes the sighting.
    on_sighting: Callable[[str, str, Evidence, str], object] | None = None
    counts: Counter[str] = field(default_factory=Counter)
    # Intents with a sighting that could not settle them yet (their attempt was out): looked at after each read.
    watching: set[tuple[str, str]] = field(default_factory=set)
    _caught_up: bool = False

    def read(self) -> int:
        """Read what is new in the inbox and settle what it shows; returns how many intents it settled."""
        if not self._caught_up:
            # After a restart: sightings kept before it may still settle intents their attempt has since left.
            self.watching.update(sightings.waiting(self.ledger, tuple(s.value for s in _MAY_SETTLE),
                                                   since=self.clock() - CATCH_UP_MS))  # fmt: skip
            self._caught_up = True
        settled = 0
        events = webhook_inbox.unread(self.inbox, self.reader)
        processed: list[str] = []
        through = 0
        try:
            for delivered in events:
                try:
                    settled += self._event(delivered, processed)
                except (sqlite3.Error, LedgerError):
                    raise  # busy or failing storage: this event is read again next time
                except Exception:
                    # One event this code cannot handle must not stop every later one (nor crash the reconciler
                    # into a restart loop on the same event): it is skipped, left unprocessed in the inbox, logged.
                    # Skipping loses only evidence of presence, never lets money move.
                    self.counts["failed"] += 1
                    logger.exception("webhook %s could not be read; skipped (left unprocessed)", delivered.event_id)
                through = delivered.rowid
        finally:
            if through:
                webhook_inbox.mark_read(self.inbox, self.reader, through=through, processed=processed,
                                        now=self.clock())  # fmt: skip
        return settled + self._settle_watched()

    def _event(self, delivered: webhook_inbox.Delivered, processed: list[str]) -> int:
        evidence = stamped_entity(delivered.body)
        if evidence is None:
            self.counts["not_ours"] += 1
            processed.append(delivered.event_id)  # evidence for no one: whoever reads it first says so
            return 0
        settled, placed = 0, False
        for sik in evidence.siks:
            for merchant_id, tool in sightings.intents_stamped(self.ledger, sik):
                placed = True
                if tool != evidence.tool:
                    self.counts["other_tool"] += 1
                    logger.warning("webhook %s: a %s entity stamped %s, an intent of %s: not evidence",
                                   delivered.event_id, evidence.tool, sik, tool)  # fmt: skip
                    continue
                settled += self._sight(delivered, evidence, merchant_id, sik)
        if placed:
            processed.append(delivered.event_id)
        else:
            self.counts["not_on_this_shard"] += 1
        return settled

    def _sight(self, delivered: webhook_inbox.Delivered, evidence: Evidence, merchant_id: str, sik: str) -> int:
        intent = intents.get_intent(self.ledger, merchant_id, sik)
        if intent is None:
            return 0
        expected = self.account_of(intent)
        if expected is not None and delivered.account_id != expected:
            self.counts["other_account"] += 1
            logger.warning("webhook %s names account %s, but %s moves money on %s: not evidence",
                           delivered.event_id, delivered.account_id, sik, expected)  # fmt: skip
            return 0
        with transaction(self.ledger):
            now = self.clock()
            new = sightings.record(self.ledger, merchant_id=merchant_id, sik=sik, source=sightings.WEBHOOK,
                                   ref=delivered.event_id, event=delivered.event, entity_id=evidence.entity_id,
                                   status=evidence.status, entity=evidence.entity, now=now)  # fmt: skip
            settled = intents.settle_from_evidence(self.ledger, merchant_id, sik, now=now, actor=self.owner)
        self.counts["sighted" if new else "sighted_again"] += 1
        if new and self.on_sighting is not None:
            self.on_sighting(merchant_id, sik, evidence, delivered.event_id)
        if settled is not None:
            self.counts[f"settled_{settled.state.value.lower()}"] += 1
            logger.info("intent %s %s on webhook %s (%s)", sik, settled.state, delivered.event_id, delivered.event)
            return 1
        if intent.state in _MAY_SETTLE:
            self.watching.add((merchant_id, sik))
        return 0

    def _settle_watched(self) -> int:
        settled = 0
        for merchant_id, sik in sorted(self.watching):
            intent = intents.get_intent(self.ledger, merchant_id, sik)  # a read first: no write lock for a wait
            if intent is None or intent.state not in _MAY_SETTLE:
                self.watching.discard((merchant_id, sik))
                continue
            if intent.state is State.IN_FLIGHT:
                continue
            with transaction(self.ledger):
                done = intents.settle_from_evidence(self.ledger, merchant_id, sik, now=self.clock(), actor=self.owner)
            self.watching.discard((merchant_id, sik))  # settled now, or nothing a sighting can settle
            if done is not None:
                self.counts[f"settled_{done.state.value.lower()}"] += 1
                logger.info("intent %s %s on a webhook seen while its attempt was out", sik, done.state)
                settled += 1
        return settled
