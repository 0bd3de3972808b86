"""Following applied money to the bank's final word (issue 27 item 3; docs/webhooks.md; `ledger/lifecycle.py`).

Run by each shard's reconciler beside the reconcile loop. Every APPLIED refund, instant settlement or RazorpayX payout
is followed from the status the call's own answer showed (and any webhook seen of it), until the rail says a final
status:

* a webhook of a followed entity (read by `reconciler/inbox.py`) is taken as an observation at once; one kept as a
  sighting whose observation failed (a busy ledger, a kill between the two commits) is taken by the next step, which
  replays every sighting not taken yet, final entities' included (`ledger/sightings.py`);
* a poller fetches each entity not final yet (`GET /v1/refunds/{id}`, `GET /v1/settlements/ondemand/{id}`,
  `GET /v1/payouts/{id}`; which rail method for which tool is one table, `_fetchers`) with a backoff: first after
  `INTERLOCK_LIFECYCLE_POLL_MS` (2 s) without webhooks, after a minute with them (the webhook is expected first:
  the fetch is the safety net), doubling to an hour, for as long as the entity is not final (a refund may be
  pending for days, a payout queued for months). A processed payout is final and not fetched again: a bank's later
  reversal of it is seen by its `payout.reversed` webhook;
* when webhooks are configured but none has arrived for `INTERLOCK_WEBHOOK_SILENCE_MS` since a money call that
  should have caused one, the stream is taken as stopped (a disabled webhook, a receiver down): every entity not
  final, applied within Razorpay's 7-day replay window, is fetched now (the backfill), and again each time the
  silence lasts another such period.

Reads only: nothing here moves money, changes an intent's state or retries anything.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from interlock.clock import now_ms
from interlock.mandate import REFUND_TOOL
from ledger import lifecycle, sightings
from ledger.db import transaction
from ledger.intents import APPLIED_OUTCOMES, Intent, get_intent
from ledger.queries import PAYOUT_TOOL, SETTLEMENT_TOOL
from ledger.states import State
from rails.models import Payout, Refund, Settlement
from rails.razorpay import RailError

logger = logging.getLogger(__name__)

WITH_WEBHOOKS_FIRST_POLL_MS = 60_000
MAX_POLL_MS = 3_600_000
WATCHED_MAX_POLL_MS = 6 * MAX_POLL_MS  # a processed payout watched for its reversal: about 30 fetches in 7 days
REPLAY_WINDOW_MS = 7 * 86_400_000  # Razorpay replays events up to 7 days back: the backfill looks as far
UNTRACKED_RETRY_MS = 5_000
POLLS_PER_STEP = 50
UNTRACKED_PER_STEP = 500
SIGHTINGS_PER_STEP = 100


class EntityReader(Protocol):
    def fetch_refund(self, refund_id: str) -> Refund: ...

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement: ...


@runtime_checkable
class PayoutReader(Protocol):
    """A rail that serves RazorpayX payouts (the REST client does; an MCP upstream may not)."""

    def fetch_payout(self, payout_id: str) -> Payout: ...


Fetch = Callable[[str], Refund | Settlement | Payout]


def _fetchers(rail: EntityReader) -> dict[str, Fetch]:
    """How each followed tool's entity is fetched from *rail*. A rail without payouts has no entry for them: a payout
    is then followed by its answer and its webhooks only (and its fetch counted `not_fetchable`)."""
    table: dict[str, Fetch] = {REFUND_TOOL: rail.fetch_refund, SETTLEMENT_TOOL: rail.fetch_instant_settlement}
    if isinstance(rail, PayoutReader):
        table[PAYOUT_TOOL] = rail.fetch_payout
    return table


@dataclass
class LifecycleFollower:
    ledger: sqlite3.Connection
    rail: EntityReader
    owner: str
    first_poll_ms: int = 2000
    webhooks: bool = False  # a webhook stream is configured: the poll waits for it first, and its silence is watched
    silence_ms: int = 600_000
    # When the newest webhook arrived (the inbox reader's view), for the silence check; None: none yet.
    last_webhook_at: Callable[[], int | None] = lambda: None
    clock: Callable[[], int] = now_ms
    counts: Counter[str] = field(default_factory=Counter)
    # The earliest money call followed since the last webhook: the one a silent stream has not told us of.
    _waiting_since: int | None = None
    # Where the next step reads the APPLIED intents not followed yet (a position in ledger/lifecycle.untracked,
    # commit order, not a time): past the last page read, or from the oldest again after a short page.
    _since: int = 0
    _retry: dict[tuple[str, str], int] = field(default_factory=dict)  # untracked intents whose fetch failed
    _fetch: dict[str, Fetch] = field(init=False)

    def __post_init__(self) -> None:
        self._fetch = _fetchers(self.rail)

    def step(self) -> int:
        """Follow what was applied since the last step, watch the webhook stream, fetch what is due; returns how
        many observations changed a status."""
        now = self.clock()
        changed = self._track_new(now)
        changed += self._take_untaken()
        self._watch_silence(now)
        for row in lifecycle.due(self.ledger, now, limit=POLLS_PER_STEP):
            changed += self._poll(row.merchant_id, row.sik, row.tool, row.entity_id, polls=row.polls)
        return changed

    # -- the start: the call's own answer -----------------------------------------------------------

    def _track_new(self, now: int) -> int:
        """Start following the intents made APPLIED since, by whichever actor (ledger/lifecycle.untracked): a page a
        step, so a long list (a backlog, intents whose first fetch keeps failing) is worked through, none starved."""
        found = lifecycle.untracked(self.ledger, after=self._since, limit=UNTRACKED_PER_STEP)
        self._since = found[-1][0] if len(found) == UNTRACKED_PER_STEP else 0
        changed = 0
        for _, merchant_id, sik in found:
            if self._retry.get((merchant_id, sik), 0) > now:
                continue
            changed += self.track(merchant_id, sik)
        return changed

    def track(self, merchant_id: str, sik: str) -> int:
        """Start following an APPLIED intent: from its answer's status and every webhook kept of it, else a fetch."""
        intent = get_intent(self.ledger, merchant_id, sik)
        if intent is None or intent.state is not State.APPLIED or intent.rail_entity_id is None \
                or not lifecycle.follows(intent.tool) or lifecycle.current(self.ledger, merchant_id, sik) is not None:
            with transaction(self.ledger):  # nothing to follow, or followed already (by another reconciler)
                lifecycle.drop_owed(self.ledger, merchant_id, sik)
            return 0
        entity_of_intent = intent.rail_entity_id
        kept = sightings.for_intent(self.ledger, merchant_id, sik)
        seen = self._answer(intent) + [(s.status, s.entity, sightings.WEBHOOK, s.ref) for s in kept
                                       if s.status is not None]  # fmt: skip
        if not seen:
            return self._poll(merchant_id, sik, intent.tool, intent.rail_entity_id, polls=0)
        changed = 0
        with transaction(self.ledger):
            now = self.clock()
            for status, entity, source, ref in seen:
                entity_id = entity["id"] if isinstance(entity.get("id"), str) else entity_of_intent
                changed += self._take(intent, entity_id, status, entity, source, ref, now)
            sightings.taken(self.ledger, merchant_id, sik, [s.ref for s in kept], now=now)
        self._expect(now)
        return changed

    def _answer(self, intent: Intent) -> list[tuple[str, dict[str, Any], str, str | None]]:
        row = self.ledger.execute(
            f"""SELECT response_json FROM intent_attempts WHERE merchant_id = ? AND sik = ? AND rail_entity_id = ?
                  AND outcome IN ({", ".join("?" for _ in APPLIED_OUTCOMES)}) ORDER BY attempt_seq LIMIT 1""",
            (intent.merchant_id, intent.sik, intent.rail_entity_id, *APPLIED_OUTCOMES),
        ).fetchone()  # fmt: skip
        try:
            entity = json.loads(row[0]) if row is not None and row[0] is not None else None
        except ValueError:
            entity = None
        if not isinstance(entity, dict) or not isinstance(entity.get("status"), str):
            return []  # applied on a list's or a webhook's word, or an answer without a status: fetched instead
        return [(entity["status"], entity, lifecycle.ANSWER, None)]

    # -- webhooks -----------------------------------------------------------------------------------

    def sighted(self, merchant_id: str, sik: str, *, entity_id: str, status: str | None, entity: dict[str, Any],
                ref: str) -> int:  # fmt: skip
        """A webhook showed an entity stamped for this intent (the inbox reader kept it as a sighting)."""
        self._heard()
        return self._take_sighting(merchant_id, sik, entity_id=entity_id, status=status, entity=entity, ref=ref)

    def _take_sighting(self, merchant_id: str, sik: str, *, entity_id: str, status: str | None,
                       entity: dict[str, Any], ref: str) -> int:  # fmt: skip
        intent = get_intent(self.ledger, merchant_id, sik)
        if intent is None or intent.state is not State.APPLIED or not lifecycle.follows(intent.tool):
            return 0  # not applied (yet): when it is, track() takes every sighting kept of it
        if lifecycle.current(self.ledger, merchant_id, sik) is None:
            return self.track(merchant_id, sik)  # its answer first, then every sighting, this one included
        with transaction(self.ledger):
            now = self.clock()
            changed = 0 if status is None else self._take(intent, entity_id, status, entity, sightings.WEBHOOK,
                                                          ref, now)  # fmt: skip
            sightings.taken(self.ledger, merchant_id, sik, [ref], now=now)
        return changed

    def _take_untaken(self) -> int:
        """Take every sighting kept but not taken: its observation failed after the sighting was committed (a busy
        ledger, a kill between the two), and the inbox reader does not tell of a sighting it kept before. A final
        entity's too: a processed payout's reversal comes only this way (the poller fetches it no more)."""
        changed = 0
        for merchant_id, sik, seen in sightings.untaken(self.ledger, limit=SIGHTINGS_PER_STEP):
            changed += self._take_sighting(merchant_id, sik, entity_id=seen.entity_id, status=seen.status,
                                           entity=seen.entity, ref=seen.ref)  # fmt: skip
        return changed

    def _heard(self) -> None:
        self._waiting_since = None

    # -- the poller ---------------------------------------------------------------------------------

    def _poll(self, merchant_id: str, sik: str, tool: str, entity_id: str, *, polls: int) -> int:
        fetch = self._fetch.get(tool)
        if fetch is None:
            self.counts["not_fetchable"] += 1
            logger.warning("lifecycle: this rail cannot fetch a %s; %s of %s is followed by webhook only", tool,
                           entity_id, sik)  # fmt: skip
            self._after_poll(merchant_id, sik, polls, failed=True, untracked_retry_ms=MAX_POLL_MS)
            return 0
        try:
            fetched = fetch(entity_id)
        except RailError as exc:
            self.counts["fetch_failed"] += 1
            logger.warning("lifecycle: %s %s of %s not fetched: %s", tool, entity_id, sik, exc)
            self._after_poll(merchant_id, sik, polls, failed=True)
            return 0
        self.counts["fetched"] += 1
        intent = get_intent(self.ledger, merchant_id, sik)
        if intent is None:
            return 0
        with transaction(self.ledger):
            now = self.clock()
            changed = self._take(intent, fetched.id, fetched.status, fetched.raw, lifecycle.POLL, None, now)
            final = lifecycle.is_final(tool, fetched.status)
            lifecycle.schedule(self.ledger, merchant_id, sik, next_poll_at=now + self._backoff(polls + 1, final=final),
                               polled=True)  # fmt: skip
        self._retry.pop((merchant_id, sik), None)
        return changed

    def _after_poll(self, merchant_id: str, sik: str, polls: int, *, failed: bool,
                    untracked_retry_ms: int = UNTRACKED_RETRY_MS) -> None:  # fmt: skip
        now = self.clock()
        if lifecycle.current(self.ledger, merchant_id, sik) is None:
            self._retry[(merchant_id, sik)] = now + untracked_retry_ms  # not followed yet: a later step tries again
            return
        with transaction(self.ledger):
            lifecycle.schedule(self.ledger, merchant_id, sik, next_poll_at=self.clock() + self._backoff(polls + 1),
                               polled=failed)  # fmt: skip

    def _backoff(self, polls: int, *, final: bool = False) -> int:
        """The wait before the next fetch: doubling to an hour, or to WATCHED_MAX_POLL_MS for a final entity the
        rail may still take a step from (a processed payout, watched for its reversal, ledger/lifecycle.py)."""
        first = WITH_WEBHOOKS_FIRST_POLL_MS if self.webhooks else self.first_poll_ms
        return min(first * 2 ** max(polls - 1, 0), WATCHED_MAX_POLL_MS if final else MAX_POLL_MS)

    # -- the silence of the webhook stream ---------------------------------------------------------

    def _expect(self, now: int) -> None:
        if self.webhooks and self._waiting_since is None:
            self._waiting_since = now

    def _watch_silence(self, now: int) -> None:
        if not self.webhooks or self._waiting_since is None:
            return
        last = self.last_webhook_at()
        if last is not None and last >= self._waiting_since:
            self._waiting_since = None
            return
        if now - self._waiting_since < self.silence_ms:
            return
        with transaction(self.ledger):
            soon = lifecycle.poll_soon(self.ledger, since=now - REPLAY_WINDOW_MS, at=now)
        self.counts["backfills"] += 1
        logger.warning("no webhook for %d s since a money call that should have caused one (last: %s): fetching %d "
                       "entities not final", (now - self._waiting_since) // 1000, last, soon)  # fmt: skip
        self._waiting_since = now  # if the silence goes on, once more a period later

    # -- one observation ------------------------------------------------------------------------------

    def _take(self, intent: Intent, entity_id: str, status: str, entity: dict[str, Any], source: str,
              ref: str | None, now: int) -> int:  # fmt: skip
        was = lifecycle.current(self.ledger, intent.merchant_id, intent.sik)
        row = lifecycle.observe(self.ledger, merchant_id=intent.merchant_id, sik=intent.sik, tool=intent.tool,
                                entity_id=entity_id, status=status, entity=entity, source=source, ref=ref, now=now,
                                next_poll_at=now + self._backoff(1), actor=self.owner)  # fmt: skip
        if row is None:
            return 0
        self.counts[f"{intent.tool}:{row.status}"] += 1
        # Logged (and counted) once per raising: an observation that changes the money at stake raises an
        # attention afresh, under the same name too (a settlement reversed further), acknowledged or not.
        if row.attention is not None and (was is None or was.raised_seq != row.raised_seq):
            self.counts[f"attention:{row.attention}"] += 1
            logger.error("ATTENTION %s: %s %s of intent %s (merchant %s) is %s%s: a person must decide", row.attention,
                         intent.tool, row.entity_id, intent.sik, intent.merchant_id, row.status,
                         f" ({entity_id} also carries its stamp)" if entity_id != row.entity_id else "")  # fmt: skip
        else:
            logger.info("lifecycle: %s %s of %s is %s (%s)", intent.tool, row.entity_id, intent.sik, row.status,
                        source)  # fmt: skip
        return 1
