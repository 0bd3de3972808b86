"""The reconcile loop: UNKNOWN → RECONCILING → APPLIED | CONFIRMED_NOT_APPLIED (→ retry) | UNKNOWN | QUARANTINED.

Work comes from hints on a Redis list and from a periodic ledger sweep; the sweep is what makes it
safe when a hint is lost. Each intent is taken under a per-intent lease (lease_owner and
lease_expires_at on the row), so several reconcilers may run. A retry is never made here: the
intent goes back to AUTHORIZED and an execute job is enqueued for the rail worker (recovery goes
through the normal path).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from interlock import clock
from interlock.clock import now_ms
from interlock.config import Settings
from interlock.failpoints import failpoint
from interlock.fees import DEFAULT_FEE_RATE, FeeRate
from interlock.mandate import REFUND_TOOL, MandateStore
from interlock.messages import Verdict
from interlock.queues import EXECUTE_JOB, NAMESPACE, rail_queue, rq_queue
from interlock.verdicts import GateResult
from ledger import intents, leases, operator
from ledger.db import transaction
from ledger.intents import Intent
from ledger.limits import reassert
from ledger.queries import PAYOUT_TOOL
from ledger.states import Event, State
from rails.base import RAIL_REST
from rails.pager import PageResult, RailLister, find_stamped

logger = logging.getLogger(__name__)

MAX_BACKOFF_MS = 30_000
# Attempts of one intent the reconciler retries automatically. An intent confirmed absent after this many is
# QUARANTINED for a person (ADR 0025): every attempt's answer was lost, and a list that showed none of them lags.
MAX_ATTEMPTS = 5
RETRIES_EXHAUSTED = "RECONCILE_RETRIES_EXHAUSTED"
STRANDED_AUTHORIZED_MS = 5_000
HTTP_IN_PROGRESS = 409


@dataclass
class Reconciler:
    settings: Settings
    ledger: sqlite3.Connection
    rail: RailLister
    redis: redis.Redis | None
    owner: str
    # What a retry is re-asserted against; without it nothing is retried automatically.
    mandates: MandateStore | None = None
    fee_rate: FeeRate = DEFAULT_FEE_RATE
    # The shard's rail queue, where retries go; an RQ queue on `redis` unless given (the simulator gives its own).
    rail_jobs: Any = None
    # The clock the reconcile delay is also measured on (see _due): the process's monotonic clock unless given.
    monotonic: Callable[[], float] = clock.monotonic
    # When this reconciler first saw each unsettled attempt, on that clock. In memory only: a restarted
    # reconciler starts watching again, which can only make it wait longer.
    seen: dict[tuple[str, str, int, str], float] = field(default_factory=dict, repr=False)

    # -- the sweep -------------------------------------------------------------------------------

    def sweep(self) -> int:
        """One pass over the ledger; returns how many intents it acted on."""
        now = now_ms()
        acted = self._expire_abandoned(now) + self._expire_holds(now)
        for merchant_id, sik, attempt_seq in self._due(now):
            acted += 1 if self.reconcile(merchant_id, sik, attempt_seq=attempt_seq) else 0
        acted += self._reenqueue_stranded(now)
        return acted

    def _expire_abandoned(self, now: int) -> int:
        """IN_FLIGHT rows whose attempt may be treated as abandoned (ADR 0005: no earlier than the attempt's
        own lease plus the call's total deadline) while no live rail worker holds the epoch they were written
        under, and RECONCILING rows whose reconciler died, go back to UNKNOWN."""
        acted = 0
        rail_lease = leases.get_lease(self.ledger, leases.RAIL_WORKER_LEASE)
        rail_alive = rail_lease is not None and rail_lease.expires_at > now
        deadline = self.settings.rail_timeout_ms
        for row in self.ledger.execute(
            "SELECT merchant_id, sik FROM intents WHERE state IN ('IN_FLIGHT', 'RECONCILING') AND lease_expires_at < ?",
            (now,),
        ).fetchall():
            try:
                with transaction(self.ledger):
                    intent = intents.require_intent(self.ledger, row["merchant_id"], row["sik"])
                    now = now_ms()
                    if intent.state is State.IN_FLIGHT:
                        until = intents.abandon_after(self.ledger, intent, deadline, self.settings.clock_skew_ms)
                        if rail_alive and rail_lease is not None and rail_lease.epoch == intent.lease_epoch:
                            # Its own worker is alive and will record the outcome. Past one more TTL it evidently
                            # will not (an unexpected error left the row): take it.
                            until += self.settings.lease_ttl_ms
                        if now < until:
                            continue
                        event = Event.LEASE_EXPIRED
                    elif intent.state is State.RECONCILING and (intent.lease_expires_at or 0) < now:
                        event = Event.RECONCILE_INCONCLUSIVE
                    else:
                        continue
                    intents.transition(self.ledger, row["merchant_id"], row["sik"], event, now=now, actor=self.owner,
                                       detail={"lease_expired_at": intent.lease_expires_at})  # fmt: skip
                acted += 1
            except Exception:
                logger.exception("could not expire the lease of %s", row["sik"])
        return acted

    def _due(self, now: int) -> list[tuple[str, str, int]]:
        """The UNKNOWN attempts due for a pass: (merchant, SIK, attempt_seq)."""
        rows = self.ledger.execute(
            """SELECT i.merchant_id, i.sik, i.state, i.tool, i.attempt_seq, i.reconcile_attempts, i.updated_at,
                      a.started_at, a.finished_at, a.sent_at, a.http_status, a.lease_expires_at AS attempt_lease
               FROM intents i LEFT JOIN intent_attempts a
                 ON a.merchant_id = i.merchant_id AND a.sik = i.sik AND a.attempt_seq = i.attempt_seq
               WHERE i.state IN ('UNKNOWN', 'IN_FLIGHT') ORDER BY i.updated_at LIMIT 1000"""
        ).fetchall()
        due = []
        deadline = self.settings.rail_timeout_ms
        watched = self.monotonic()
        sightings: dict[tuple[str, str, int, str], float] = {}
        # Over REST a refund carries X-Refund-Idempotency (and a receipt the rail will not reuse): if it lands
        # after a read that missed it, the retry that read authorizes is answered with that same refund, never
        # a second one. An upstream MCP server's create_refund takes no key, so there it waits like a settlement.
        keyed_refunds = self.settings.rail == RAIL_REST
        for row in rows:
            # The call may land on the rail until it ended: when its worker recorded an answer, the call was
            # over by then; otherwise it may have been out until the attempt's lease plus the call's deadline
            # (ADR 0005). The rail has no read-your-writes after that: look only min_delay later.
            finished = row["finished_at"] is not None
            attempt = (row["merchant_id"], row["sik"], row["attempt_seq"])
            seen = sightings[(*attempt, "open")] = self.seen.get((*attempt, "open"), watched)
            answered = seen
            if finished:
                answered = sightings[(*attempt, "answered")] = self.seen.get((*attempt, "answered"), watched)
            if (absent := self.seen.get((*attempt, "absent"))) is not None:
                sightings[(*attempt, "absent")] = absent  # a keyed refund's first absent read (ADR 0026)
            if row["state"] != "UNKNOWN":
                continue  # IN_FLIGHT: only watched, so that the wait below counts from before it was given up
            # 409: the rail said an earlier request with this key is still running; reading sooner finds nothing.
            keyed = keyed_refunds and row["tool"] == REFUND_TOOL and row["http_status"] != HTTP_IN_PROGRESS
            if finished and keyed:
                gave_up = row["finished_at"]  # an early read costs at most a retry the rail deduplicates
            elif finished:
                # No key the rail honours (a settlement, ADR 0010), or a rail still at work (409): it may still
                # apply the call until the call's own deadline, counted from when the request left (a pause
                # between the IN_FLIGHT commit and the send moves it later than the commit).
                left = max(row["started_at"] or 0, row["sent_at"] or 0)
                gave_up = max(left + deadline, row["finished_at"])
            else:
                lease_until = row["attempt_lease"] or ((row["started_at"] or 0) + self.settings.lease_ttl_ms)
                gave_up = lease_until + deadline
            ready_at = gave_up + self.settings.reconcile_min_delay_ms
            if row["reconcile_attempts"] > 0:
                backoff = min(500 * 2 ** (row["reconcile_attempts"] - 1), MAX_BACKOFF_MS)
                ready_at = max(ready_at, row["updated_at"] + backoff)
            # The times above are wall-clock readings, the rail worker's and ours, while the rail's lists lag in
            # real time. A step of either clock (NTP, a VM resumed, another machine's clock) must not make a list
            # read early (finding F1, ADR 0023): the same wait must also have passed on our own monotonic clock
            # since we first saw this attempt unsettled. Seen with its answer recorded, the call had ended (the
            # rail may still apply a settlement for its deadline). Seen open (IN_FLIGHT, or given up without an
            # answer), its request may leave until the row's lease, one TTL after the commit, and run its deadline.
            delay = self.settings.reconcile_min_delay_ms
            # The TTL the worker wrote the row lease with, when it was configured longer than ours.
            ttl = self.settings.lease_ttl_ms
            if row["attempt_lease"] is not None and row["started_at"] is not None:
                ttl = max(ttl, row["attempt_lease"] - row["started_at"])
            waited = (watched - seen) * 1000 >= ttl + deadline + delay
            if finished:
                waited = waited or (watched - answered) * 1000 >= (0 if keyed else deadline) + delay
            if ready_at <= now and waited:
                due.append(attempt)
        self.seen.clear()
        self.seen.update(sightings)  # in place: a copy of this reconciler shares what it has seen
        return due

    def _reenqueue_stranded(self, now: int) -> int:
        """AUTHORIZED intents nobody executed (a lost queue message): hand them to the rail worker again.
        Harmless when duplicated: execute acts only from AUTHORIZED."""
        rows = self.ledger.execute(
            "SELECT merchant_id, sik FROM intents WHERE state = 'AUTHORIZED' AND updated_at < ?",
            (now - STRANDED_AUTHORIZED_MS,),
        ).fetchall()
        sent = 0
        for row in rows:
            # One hand-over per intent per interval, not one per sweep: a backlog must not flood the queue.
            if self.redis is not None and not self._claim(f"stranded:{row['sik']}", STRANDED_AUTHORIZED_MS):
                continue
            self._enqueue_execute(row["merchant_id"], row["sik"])
            sent += 1
        return sent

    def _claim(self, name: str, ttl_ms: int) -> bool:
        assert self.redis is not None
        try:
            return bool(self.redis.set(f"{NAMESPACE}:reconciler:{name}", "1", nx=True, px=ttl_ms))
        except redis.RedisError:
            return True  # without Redis the enqueue fails anyway and the next sweep tries again

    def _expire_holds(self, now: int) -> int:
        """A hold past approval.hold_expiry_ms becomes BLOCKED (HOLD_EXPIRED) even when no operator looks."""
        if not operator.expired_holds(self.ledger, now):
            return 0  # the common case takes no write lock away from the rail worker
        with transaction(self.ledger):  # the time under the write lock, like every ledger writer
            return len(operator.expire_holds(self.ledger, now_ms()))

    # -- one intent ------------------------------------------------------------------------------

    def reconcile(self, merchant_id: str, sik: str, *, attempt_seq: int | None = None) -> bool:
        """One reconcile pass for one UNKNOWN intent; False when it was not ours to take. With *attempt_seq* (the
        sweep's), only while the intent is still at the attempt that was judged due: another reconciler may have
        settled it and authorized a retry since, whose own wait has not passed (ADR 0023)."""
        with transaction(self.ledger):
            now = now_ms()  # under the write lock: a wait for it must not age the lease taken below
            intent = intents.get_intent(self.ledger, merchant_id, sik)
            if intent is None or intent.state is not State.UNKNOWN:
                return False
            if attempt_seq is not None and intent.attempt_seq != attempt_seq:
                return False
            settled = intents.settle_from_evidence(self.ledger, merchant_id, sik, now=now, actor=self.owner)
            if settled is not None:
                # An attempt's answer already carried our stamp (a fenced worker kept it): no list read can outvote it.
                # On other terms than the intent's it is QUARANTINED instead (ADR 0016).
                logger.info("intent %s %s on the evidence of an earlier attempt", sik, settled.state)
                return True
            if self._should_quarantine(intent, now):
                intents.transition(self.ledger, merchant_id, sik, Event.QUARANTINE, now=now, actor=self.owner,
                                   detail={"reason": self._quarantine_reason(intent, now)},
                                   set_fields={"reason_code": "RECONCILE_EXHAUSTED"})  # fmt: skip
                logger.error("intent %s QUARANTINED after %d passes", sik, intent.reconcile_attempts)
                return True
            intent = intents.begin_reconcile(self.ledger, merchant_id, sik, now=now, owner=self.owner,
                                             lease_expires_at=now + self.settings.lease_ttl_ms)  # fmt: skip
        # The whole pass ends before our per-intent lease does (each page read has its own total deadline too).
        budget_s = max(self.settings.lease_ttl_ms - self.settings.rail_timeout_ms, 0) / 1000
        result = find_stamped(self.rail, intent.tool, intent.subject_id, sik, deadline=clock.monotonic() + budget_s,
                              account_number=intent.params.get("account_number"))  # fmt: skip
        failpoint("reconciler.after_finding_before_commit")
        retry = self._commit_finding(intent, result)
        if retry:
            self._enqueue_execute(merchant_id, sik)
        return True

    def _commit_finding(self, taken: Intent, result: PageResult) -> bool:
        with transaction(self.ledger):
            now = now_ms()
            intent = intents.get_intent(self.ledger, taken.merchant_id, taken.sik)
            if (intent is None or intent.state is not State.RECONCILING or intent.lease_owner != self.owner
                    or intent.attempt_seq != taken.attempt_seq):  # fmt: skip
                logger.warning("reconcile lease on %s lost; finding discarded", taken.sik)
                return False
            rejected = intent.reason_code == "RAIL_REJECTED_AFTER_RETRY"
            # The rail refused our receipt or key as used: it holds an entity of ours, so a list without our stamp
            # lags; it does not show absence. Read again (with the backoff) until it shows it, or QUARANTINED.
            in_use = intent.reason_code == "RAIL_KEY_IN_USE"  # rail_worker/classify.KEY_IN_USE
            differs = intent.mismatch(result.matched_raw) if result.matched_raw is not None else None
            retry: GateResult | None = None
            why = ""
            if result.matched_entity_id is not None and differs is not None:
                return self._quarantine_mismatch(intent, result, differs, now)
            if result.matched_entity_id is not None:
                outcome, event = "APPLIED", Event.RECONCILE_FOUND_APPLIED
            elif result.exhausted and not in_use:
                outcome = "CONFIRMED_NOT_APPLIED"
                # A retry the rail refused definitively, with our stamp confirmed absent: the refusal was true.
                event = Event.RECONCILE_CONFIRMED_REJECTED if rejected else Event.RECONCILE_CONFIRMED_ABSENT
                if event is Event.RECONCILE_CONFIRMED_ABSENT and intent.attempt_seq >= MAX_ATTEMPTS:
                    event = Event.QUARANTINE  # ADR 0025: a person reads the rail, not another automatic "absent"
                elif event is Event.RECONCILE_CONFIRMED_ABSENT:
                    retry, why = self._retry_check(intent, now)
                    if retry is None and not self._absence_proved(intent):
                        # ADR 0026: read early, as a keyed refund may be, and no retry will prove it: read again.
                        outcome, event = "INCONCLUSIVE", Event.RECONCILE_INCONCLUSIVE
            else:
                outcome, event = "INCONCLUSIVE", Event.RECONCILE_INCONCLUSIVE
            finding: dict[str, object] = {"error": result.error}
            if outcome == "INCONCLUSIVE" and result.exhausted and not in_use:
                finding["absent_once"] = f"no retry will follow ({why}): absence is read again after the delay"
            intents.record_finding(
                self.ledger, merchant_id=intent.merchant_id, sik=intent.sik, attempt_seq=intent.attempt_seq,
                outcome=outcome, pages_scanned=result.pages_scanned, pagination_exhausted=result.exhausted,
                matched_entity_id=result.matched_entity_id, now=now, detail=finding,
            )  # fmt: skip
            fields: dict[str, object] = {"lease_owner": None, "lease_expires_at": None}
            if result.matched_entity_id is not None:
                fields.update(rail_entity_id=result.matched_entity_id, reason_code=None)
            elif event is Event.RECONCILE_CONFIRMED_REJECTED:
                fields.update(reason_code="RAIL_REJECTED")
            elif event is Event.QUARANTINE:
                fields.update(reason_code=RETRIES_EXHAUSTED)
            detail: dict[str, object] = {"pages_scanned": result.pages_scanned}
            if event is Event.QUARANTINE:
                detail["reason"] = (f"confirmed absent after attempt {intent.attempt_seq}, the last automatic one: "
                                    "every answer was lost, so a person checks the rail")  # fmt: skip
            intent = intents.transition(self.ledger, intent.merchant_id, intent.sik, event, now=now, actor=self.owner,
                                        detail=detail, set_fields=fields)  # fmt: skip
            if event is Event.RECONCILE_CONFIRMED_ABSENT and retry is not None:
                return self._authorize_retry(intent, now, result.pages_scanned, retry)
            if event is Event.RECONCILE_CONFIRMED_ABSENT:
                logger.warning("intent %s confirmed not applied; no retry: %s", intent.sik, why)
        if intent.state is State.QUARANTINED:
            logger.error("intent %s QUARANTINED: confirmed absent after its last automatic attempt (%d)", taken.sik,
                         intent.attempt_seq)  # fmt: skip
        else:
            logger.info("intent %s: %s after %d pages", taken.sik, outcome, result.pages_scanned)
        return False

    def _quarantine_mismatch(self, intent: Intent, result: PageResult, differs: dict[str, object], now: int) -> bool:
        """A list entity carries our stamp but not our terms (ADR 0016): not APPLIED, not absent — something moved
        under our identity that is not what we asked. QUARANTINED with both sets of terms on the audit record."""
        intents.record_finding(
            self.ledger, merchant_id=intent.merchant_id, sik=intent.sik, attempt_seq=intent.attempt_seq,
            outcome="INCONCLUSIVE", pages_scanned=result.pages_scanned, pagination_exhausted=False,
            matched_entity_id=None, now=now,
            detail={"stamped_entity_id": result.matched_entity_id, "terms_mismatch": differs},
        )  # fmt: skip
        intents.transition(self.ledger, intent.merchant_id, intent.sik, Event.TERMS_MISMATCH, now=now,
                           actor=self.owner, detail={"rail_entity_id": result.matched_entity_id, **differs},
                           set_fields={"lease_owner": None, "lease_expires_at": None,
                                       "reason_code": "RAIL_TERMS_MISMATCH"})  # fmt: skip
        logger.error("intent %s QUARANTINED: %s carries its stamp with other terms %s", intent.sik,
                     result.matched_entity_id, differs)  # fmt: skip
        return False

    def _retry_check(self, intent: Intent, now: int) -> tuple[GateResult | None, str]:
        """Whether a confirmed-absent call may be retried now: CONFIRMED_NOT_APPLIED → AUTHORIZED only while the
        mandate it was judged under is still the one configured and still allows it — grant, expiry, range and G3
        windows (issue 13, items 5 and 9); past MAX_ATTEMPTS it is QUARANTINED before this is asked. The ALLOW to
        authorize it with, or why not. Without a retry it stays CONFIRMED_NOT_APPLIED: the agent's repeat is judged
        afresh by the gates."""
        mandate = self.mandates.get(intent.agent_id) if self.mandates is not None else None
        if mandate is None or mandate.mandate_hash != intent.mandate_hash:
            return None, "its mandate is no longer configured"
        check = reassert(self.ledger, intent, mandate, now_ms=now, rate=self.fee_rate,
                         clock_skew_ms=self.settings.clock_skew_ms)  # fmt: skip
        if check.verdict is not Verdict.ALLOW:
            return None, f"{check.reason_code} {check.detail}"
        return check, ""

    def _absence_proved(self, intent: Intent) -> bool:
        """A list read concludes absence for good only once it can no longer be early (ADR 0026). A keyed REST
        refund is read as soon as its answer is recorded plus the delay (`_due`): early on purpose, because the
        retry that read authorizes carries the same key and its answer settles it. When no retry will follow, the
        stamp must be absent again on a read at least the delay later on this reconciler's own clock."""
        if not (self.settings.rail == RAIL_REST and intent.tool in (REFUND_TOOL, PAYOUT_TOOL)):
            return True  # read only after the call's deadline plus the delay (ADR 0010)
        # A payout is keyed as a REST refund is (X-Payout-Idempotency, ADR 0028): its first request may still be
        # applied past its deadline, so absence without a retry to settle it needs the second read too.
        key = (intent.merchant_id, intent.sik, intent.attempt_seq, "absent")
        first = self.seen.setdefault(key, self.monotonic())
        return (self.monotonic() - first) * 1000 >= self.settings.reconcile_min_delay_ms

    def _authorize_retry(self, intent: Intent, now: int, pages: int, check: GateResult) -> bool:
        intents.transition(self.ledger, intent.merchant_id, intent.sik, Event.RETRY_AUTHORIZED, now=now,
                           actor=self.owner, detail={"after_attempt": intent.attempt_seq},
                           reasserted=check)  # fmt: skip
        logger.info("intent %s confirmed not applied after %d pages: retry authorized", intent.sik, pages)
        return True

    def _attempt_started_at(self, intent: Intent) -> int:
        row = self.ledger.execute(
            "SELECT MAX(started_at) FROM intent_attempts WHERE merchant_id = ? AND sik = ?",
            (intent.merchant_id, intent.sik),
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else intent.updated_at

    def _should_quarantine(self, intent: Intent, now: int) -> bool:
        if intent.reconcile_attempts == 0:
            return False  # never quarantine on age alone before the rail has been read even once
        return (intent.reconcile_attempts >= self.settings.reconcile_max_passes
                or now - self._attempt_started_at(intent) > self.settings.reconcile_max_age_ms)  # fmt: skip

    def _quarantine_reason(self, intent: Intent, now: int) -> str:
        age_s = (now - self._attempt_started_at(intent)) // 1000
        return f"unsettled after {intent.reconcile_attempts} reconcile passes, {age_s}s after the attempt started"

    def _enqueue_execute(self, merchant_id: str, sik: str) -> None:
        if self.redis is None:
            return
        try:
            queue = self.rail_jobs
            if queue is None:
                queue = rq_queue(rail_queue(self.settings.shard), self.redis)
            queue.enqueue(EXECUTE_JOB, merchant_id, sik, None, result_ttl=600, failure_ttl=86400)
        except redis.RedisError as exc:  # the next sweep re-enqueues AUTHORIZED intents
            logger.warning("could not enqueue the retry of %s: %s", sik, exc)
