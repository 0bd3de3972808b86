"""A payout's G2 read (rails/pager.py payout_basis; ADR 0028, finding F11): the RazorpayX balance, and the payouts
it does not show yet. The bank moves payouts on while the reads go out, so the order of the reads is what keeps a
payout from falling between them. A scripted rail, in memory: the bank's moves happen at chosen reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from rails.models import BankingBalance, Page, Payout
from rails.pager import MAX_OURS_FETCHED, NOT_DEBITED, payout_basis
from rails.razorpay import RailError

ACCOUNT = "7878780080316316"
FEE = 590


@dataclass
class Bank:
    """One RazorpayX account: its balance and payouts, listed by status (a list may lag: `unlisted` are left out),
    and a move the bank makes right after the n-th read."""

    balance: int
    payouts: dict[str, tuple[int, str]] = field(default_factory=dict)  # id -> (amount, status)
    unlisted: set[str] = field(default_factory=set)
    move_after_read: int | None = None
    move: Callable[[Bank], None] | None = None
    reads: list[str] = field(default_factory=list)

    def _read(self, what: str) -> None:
        self.reads.append(what)
        if self.move is not None and len(self.reads) == self.move_after_read:
            self.move(self)

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = 100, skip: int = 0) -> Page[Payout]:  # fmt: skip
        items = [self._payout(pid) for pid, (_, s) in sorted(self.payouts.items())
                 if s == status and pid not in self.unlisted][skip:skip + count]  # fmt: skip
        self._read(f"list {status}")
        return Page(items=items, requested_count=count, skip=skip)

    def fetch_payout(self, payout_id: str) -> Payout:
        payout = self._payout(payout_id)
        self._read(f"fetch {payout_id}")
        return payout

    def fetch_banking_balance(self, account_number: str) -> BankingBalance:
        balance = BankingBalance(account_number=account_number, currency="INR", amount=self.balance)
        self._read("balance")
        return balance

    def _payout(self, payout_id: str) -> Payout:
        amount, status = self.payouts[payout_id]
        return Payout(id=payout_id, fund_account_id="fa_1", amount=amount, currency="INR", status=status)

    def start(self, payout_id: str) -> None:
        """The payout starts: the balance is debited its amount and fee, and it leaves every undebited list."""
        amount, _ = self.payouts[payout_id]
        self.payouts[payout_id] = (amount, "processing")
        self.balance -= amount + FEE

    def room(self) -> int:
        """What the account can still pay, in truth, once everything waiting has run."""
        waiting = sum(a + FEE for a, s in self.payouts.values() if s in NOT_DEBITED)
        return self.balance - waiting


@pytest.mark.parametrize("after_read", range(1, len(NOT_DEBITED) + 2))
@pytest.mark.parametrize("was", ["pending", "queued", "scheduled"])
def test_a_payout_debited_between_any_two_reads_is_counted_in_one_of_them(after_read: int, was: str) -> None:
    """Rs 500 waiting, then debited at some point during the read. Whenever that is, balance less waiting is never
    more than the account can pay: read the balance first and a payout debited after it is in neither."""
    bank = Bank(balance=100_000, payouts={"pout_A": (50_000, was)}, move_after_read=after_read,
                move=lambda b: b.start("pout_A"))  # fmt: skip
    balance, waiting = payout_basis(bank, ACCOUNT, ours=[], fee_minor=FEE)
    assert bank.reads[-1] == "balance"
    assert balance.amount - waiting <= bank.room() == 100_000 - 50_000 - FEE


def test_a_payout_moving_through_the_undebited_statuses_is_seen_in_one_list() -> None:
    """Approved while the lists are read (pending, then queued for balance): the lists are read in the order a payout
    goes through them, so it is in one of them whatever read it moved after."""
    for after_read in range(1, len(NOT_DEBITED) + 1):
        bank = Bank(balance=100_000, payouts={"pout_A": (50_000, "pending")}, move_after_read=after_read,
                    move=lambda b: b.payouts.update(pout_A=(50_000, "queued")))  # fmt: skip
        balance, waiting = payout_basis(bank, ACCOUNT, ours=[], fee_minor=FEE)
        assert balance.amount - waiting <= bank.room(), bank.reads


def test_our_payout_no_list_shows_yet_is_fetched_by_id_and_counted() -> None:
    """A list lags a new payout; the ledger knows it is ours and not seen debited, so it is fetched. One of ours the
    lists show is not fetched, nor counted twice; one fetched that has started is in the balance already."""
    bank = Bank(balance=100_000, payouts={"pout_A": (30_000, "queued"), "pout_B": (20_000, "pending"),
                                          "pout_C": (10_000, "processing"), "pout_X": (5_000, "queued")},
                unlisted={"pout_A", "pout_C"})  # fmt: skip
    balance, waiting = payout_basis(bank, ACCOUNT, ours=["pout_A", "pout_B", "pout_C"], fee_minor=FEE)
    assert waiting == (30_000 + FEE) + (20_000 + FEE) + (5_000 + FEE)  # pout_X: another's, listed
    assert [r for r in bank.reads if r.startswith("fetch")] == ["fetch pout_A", "fetch pout_C"]
    assert balance.amount - waiting == bank.room()


def test_too_many_of_ours_unfollowed_fails_closed() -> None:
    """The lifecycle follower far behind: the read refuses rather than fetch hundreds of payouts per call judged."""
    ours = [f"pout_{i:04d}" for i in range(MAX_OURS_FETCHED + 1)]
    bank = Bank(balance=100_000, payouts={p: (100, "processing") for p in ours})
    with pytest.raises(RailError, match="lifecycle follower"):
        payout_basis(bank, ACCOUNT, ours=ours, fee_minor=FEE)
    assert not [r for r in bank.reads if r.startswith("fetch")]
