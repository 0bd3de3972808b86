"""Page the rail's list for our stamp until the list runs out (SPEC §9; ADR 0004).

Absence on page one is not absence: a page shorter than `count` is the only proof the list is
exhausted. Matches only on notes.interlock_sik == sik or receipt (a payout's reference_id) == "ilk_" + sik —
never on amount. The match
is handed back whole (`matched_raw`): whether its terms are the intent's is the caller's to judge (ADR 0016),
and a stamped entity with other terms is still ours to find, never a reason to page on past it.

A pass may be given a deadline (a clock.monotonic() instant) so that it ends before the reconciler's
per-intent lease does. It is checked before each page; each page read is one rail call with its own
total deadline, so a pass overruns its deadline by at most one page read. A pass cut short is
inconclusive, never "exhausted".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from interlock import clock
from interlock.failpoints import failpoint
from interlock.sik import receipt_for
from interlock.tools import PAYOUT_TOOL
from rails.models import BankingBalance, Page, Payout, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind

logger = logging.getLogger(__name__)

PAGE_SIZE = 100
MAX_PAGES = 1000  # 100k entities; past that a person should look (INCONCLUSIVE, then quarantine)


class RailLister(Protocol):
    def list_refunds_for_payment(self, payment_id: str, *, count: int = ..., skip: int = ...) -> Page[Refund]: ...

    def list_instant_settlements(self, *, count: int = ..., skip: int = ...) -> Page[Settlement]: ...

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = ..., skip: int = ...) -> Page[Payout]: ...  # fmt: skip


@dataclass(frozen=True, slots=True)
class PageResult:
    matched_entity_id: str | None
    pages_scanned: int
    exhausted: bool
    error: str | None = None
    # The matched entity as the rail returned it: its payment, amount and currency are judged against the intent.
    matched_raw: dict[str, Any] | None = None
    # With `accept`: the stamped entities passed over because they were not what the intent asked (ADR 0016).
    passed_over: tuple[str, ...] = ()


def find_stamped(rail: RailLister, tool: str, subject: str, sik: str, *, page_size: int = PAGE_SIZE,
                 max_pages: int = MAX_PAGES, deadline: float | None = None,
                 accept: Callable[[dict[str, Any]], bool] | None = None,
                 account_number: str | None = None) -> PageResult:  # fmt: skip
    """The first entity carrying *sik*'s stamp. With *accept*, a stamped entity it refuses (another payment,
    amount or currency) is passed over and named in `passed_over`, and paging goes on: the operator proving
    that nothing of ours on the intent's terms exists (ops/quarantine). A payout is looked for among the
    RazorpayX account *account_number*'s payouts with our reference_id ("ilk_" + SIK, SPEC §18), paged to the end
    like every list; a payout's key is its SIK too, so a retry after a lagging list replays what it missed."""
    if tool == PAYOUT_TOOL and account_number is None:
        raise ValueError(f"paging for payout {sik} needs the RazorpayX account it was made from")
    pages = 0
    passed: list[str] = []
    skip = 0
    try:
        while pages < max_pages:
            if deadline is not None and clock.monotonic() >= deadline:
                logger.warning("paging %s for %s: deadline passed after %d pages", subject, sik, pages)
                return PageResult(None, pages, exhausted=False, error=f"deadline passed after {pages} pages",
                                  passed_over=tuple(passed))  # fmt: skip
            page: Page[Refund] | Page[Settlement] | Page[Payout]
            if tool == "create_refund":
                page = rail.list_refunds_for_payment(subject, count=page_size, skip=skip)
            elif tool == PAYOUT_TOOL:
                assert account_number is not None
                page = rail.list_payouts(account_number, reference_id=receipt_for(sik), count=page_size, skip=skip)
            else:
                page = rail.list_instant_settlements(count=page_size, skip=skip)
            pages += 1
            for entity in page.items:
                if entity.carries_stamp(sik) and accept is not None and not accept(dict(entity.raw)):
                    passed.append(entity.id)
                elif entity.carries_stamp(sik):
                    return PageResult(entity.id, pages, exhausted=False, matched_raw=dict(entity.raw),
                                      passed_over=tuple(passed))  # fmt: skip
            if page.exhausted:
                return PageResult(None, pages, exhausted=True, passed_over=tuple(passed))
            skip += len(page.items)
            failpoint("reconciler.mid_pagination")
    except RailError as exc:
        logger.warning("paging %s for %s stopped at page %d: %s", subject, sik, pages + 1, exc)
        return PageResult(None, pages, exhausted=False, error=str(exc)[:500], passed_over=tuple(passed))
    return PageResult(None, pages, exhausted=False, error=f"gave up after {max_pages} pages", passed_over=tuple(passed))


# Payouts the rail holds without having debited the balance for them yet (SPEC §18; ADR 0028), in the order a
# payout passes through them (scheduled, or pending a person's approval, then queued for balance): lists read in
# this order cannot miss one that moves from one to the next between two reads (finding F11).
NOT_DEBITED = ("scheduled", "pending", "queued")
# Our own payouts fetched by id on one read, at most: past that the lifecycle follower is behind, and the read fails
# closed rather than making hundreds of calls per payout judged. MAX_OURS bounds the ids the ledger hands over (a
# long queue of ours, listed, needs no fetch); a caller asks for one more, and more than MAX_OURS fails closed too.
MAX_OURS_FETCHED = 100
MAX_OURS = 10_000


class PayoutReader(Protocol):
    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = ..., skip: int = ...) -> Page[Payout]: ...  # fmt: skip

    def fetch_payout(self, payout_id: str) -> Payout: ...

    def fetch_banking_balance(self, account_number: str) -> BankingBalance: ...


def payout_basis(rail: PayoutReader, account_number: str, *, ours: Sequence[str], fee_minor: int = 0,
                 page_size: int = PAGE_SIZE) -> tuple[BankingBalance, int]:  # fmt: skip
    """The RazorpayX balance and the minor units of the account's payouts the rail holds but has not debited yet:
    what a payout's G2 is judged against (ADR 0028). Each undebited payout takes its amount and *fee_minor* (a
    queued payout shows no fee yet) when it runs.

    The order of the reads is the rule (finding F11). Every undebited list is paged to its end first; then each of
    *ours* — our APPLIED payouts the ledger has not seen debited or ended (ledger.queries.payouts_not_known_debited)
    — that no list showed undebited is fetched by id, since a list may lag a new payout or lose one that moved
    between pages; the balance is read last. A payout only ever moves from undebited to debited (or ends), so one
    seen undebited before the balance read is either still waiting or in that balance: counted twice at worst,
    which refuses, never pays. Read the other way round, a payout debited between the two reads would be in
    neither. A RailError goes to the caller, who fails closed."""
    if len(ours) > MAX_OURS:
        raise _follower_behind(MAX_OURS)
    waiting: dict[str, int] = {}
    for status in NOT_DEBITED:
        skip = 0
        for _ in range(MAX_PAGES):
            page = rail.list_payouts(account_number, status=status, count=page_size, skip=skip)
            waiting.update((p.id, p.amount + fee_minor) for p in page.items if p.status == status)
            if page.exhausted:
                break
            skip += len(page.items)
        else:
            raise RailError(RailErrorKind.AMBIGUOUS, f"more than {MAX_PAGES} pages of {status} payouts",
                            method="GET", path="/v1/payouts")  # fmt: skip
    unlisted = [payout_id for payout_id in ours if payout_id not in waiting]
    if len(unlisted) > MAX_OURS_FETCHED:
        raise _follower_behind(MAX_OURS_FETCHED)
    for payout_id in unlisted:
        payout = rail.fetch_payout(payout_id)
        if payout.status in NOT_DEBITED:
            waiting[payout.id] = payout.amount + fee_minor
    return rail.fetch_banking_balance(account_number), sum(waiting.values())


def _follower_behind(most: int) -> RailError:
    return RailError(RailErrorKind.AMBIGUOUS, f"more than {most} of this account's payouts are not yet followed to "
                     "a debit (is the reconciler's lifecycle follower running?); a payout is judged again once it "
                     "catches up", method="GET", path="/v1/payouts")  # fmt: skip
