"""A reconciler pass given a deadline stops between pages and says it is inconclusive, never exhausted."""

from __future__ import annotations

import time

from interlock.clock import use_clock
from rails.models import Page, Refund, Settlement
from rails.pager import find_stamped

SIK = "P" * 32


def refund(n: int) -> Refund:
    return Refund.from_raw({"id": f"rfnd_{n:014d}", "entity": "refund", "amount": 100, "currency": "INR",
                            "payment_id": "pay_PAGER0000001", "notes": {"interlock_sik": f"OTHER{n}"},
                            "receipt": None, "status": "processed", "created_at": 1700000000})  # fmt: skip


class StoppedClock:
    """A monotonic clock that moves only when a rail read says it took time: how busy the machine is cannot move
    a deadline past before the test means it to."""

    def __init__(self) -> None:
        self.now = 100.0

    def time_ns(self) -> int:
        return time.time_ns()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class EndlessList:
    """Full pages without our stamp, for ever; the page after `slow_after` takes until `until` on *clock*."""

    def __init__(self, *, slow_after: int | None = None, until: float = 0.0, clock: StoppedClock | None = None) -> None:
        self.calls = 0
        self.slow_after = slow_after
        self.until = until
        self.clock = clock

    def list_refunds_for_payment(self, payment_id: str, *, count: int = 100, skip: int = 0) -> Page[Refund]:
        self.calls += 1
        if self.slow_after is not None and self.calls > self.slow_after:
            assert self.clock is not None
            self.clock.now = max(self.clock.now, self.until)  # a rail read that takes until the pass's deadline
        return Page[Refund](items=[refund(skip + i) for i in range(count)], requested_count=count, skip=skip, raw={})

    def list_instant_settlements(self, *, count: int = 10, skip: int = 0) -> Page[Settlement]:
        raise AssertionError("not a settlement")


def test_a_deadline_passed_between_pages_is_inconclusive() -> None:
    now = StoppedClock()
    with use_clock(now):
        deadline = now.monotonic() + 0.3
        rail = EndlessList(slow_after=1, until=deadline, clock=now)
        result = find_stamped(rail, "create_refund", "pay_PAGER0000001", SIK, page_size=5, deadline=deadline)
    assert result.matched_entity_id is None and not result.exhausted
    assert result.pages_scanned == 2 and rail.calls == 2
    assert result.error is not None and "deadline" in result.error


def test_a_deadline_already_passed_reads_nothing() -> None:
    rail = EndlessList()
    result = find_stamped(rail, "create_refund", "pay_PAGER0000001", SIK, deadline=time.monotonic() - 1)
    assert (result.pages_scanned, result.exhausted, rail.calls) == (0, False, 0)
    assert result.error is not None and "deadline" in result.error


def test_without_a_deadline_paging_goes_on_to_its_page_limit() -> None:
    rail = EndlessList()
    result = find_stamped(rail, "create_refund", "pay_PAGER0000001", SIK, page_size=5, max_pages=7)
    assert (result.pages_scanned, result.exhausted, rail.calls) == (7, False, 7)


def test_with_accept_a_stamped_entity_on_other_terms_is_passed_over_and_named() -> None:
    # The operator's proof that nothing of ours on the intent's terms exists (ADR 0016): paging goes on past it.
    other = Refund.from_raw({"id": "rfnd_OTHERTERMS0001", "amount": 1, "currency": "USD", "payment_id": "pay_X",
                             "status": "processed", "notes": {"interlock_sik": SIK}})  # fmt: skip

    class Rail:
        def list_refunds_for_payment(self, payment_id: str, *, count: int = 100, skip: int = 0) -> Page[Refund]:
            items = [other] if skip == 0 else []
            return Page[Refund](items=items, requested_count=1, skip=skip)

        def list_instant_settlements(self, *, count: int = 100, skip: int = 0) -> Page[Settlement]:
            raise AssertionError("not a settlement")

    result = find_stamped(Rail(), "create_refund", "pay_PAGER0000001", SIK, page_size=1,
                          accept=lambda raw: raw["amount"] == 2500)  # fmt: skip
    assert (result.matched_entity_id, result.exhausted, result.passed_over) == (None, True, (other.id,))
    assert find_stamped(Rail(), "create_refund", "pay_PAGER0000001", SIK, page_size=1).matched_entity_id == other.id
