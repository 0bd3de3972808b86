"""The simulated rail: payments, refunds and instant settlements as Razorpay keeps them (SPEC §14), and every
way a real rail lets its caller down.

It answers the `rails.base.Rail` protocol with the same typed entities and `RailError` kinds as the REST
client, so the actors cannot tell it from one. What it adds is a *journal* — every entity it created, when,
and on which terms — that the independent checker reads, and a fault for every money call, drawn from the
seed: applied and answered; applied with the answer lost (a gateway 504); refused before anything was applied
(a connect error, or a 500 before applying); applied only after the caller's deadline; the idempotency key
forgotten, so a retry after an earlier apply is refused 4xx for its reused receipt;
answered with a stamped entity on other terms; answered with another call's entity (a gateway's replayed
response), applied or not. Its lists may lag behind its writes, as Razorpay's do. Per seed, it may keep refunds'
idempotency keys only briefly, and may check a refund's amount before its receipt. It journals every stamped answer
it gives a caller (`deliveries`), which the checker holds the ledger's attempt rows to.

The first byte of a money request leaves when `rails.deadline.check_send_window()` says it may — after the
scheduler point, so a pause lands before the check that guards the send, as it would in the REST client.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_types import Tool

from rails.deadline import SendWindowClosed, check_send_window
from rails.mcp_upstream import NO_PAYOUTS
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind
from simulation.scheduler import Scheduler

# Razorpay's limits on an entity's notes (SPEC §10), the rail's own facts: not Interlock's constants, which obey them.
RAIL_MAX_NOTES = 15
MAX_NOTE_CHARS = 256

PAYOUT_FEE, PAYOUT_TAX = 590, 90  # RazorpayX's ₹5 per payout plus 18% GST, debited with the amount
PAYOUT_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "pending": ("queued", "rejected", "failed"), "queued": ("processing", "cancelled"),
    "processing": ("processed", "failed", "reversed"),
    "processed": ("reversed",),
}
MONEY_FAULTS = ("ok", "lost_answer", "not_applied", "error_not_applied", "late_apply", "key_forgotten", "other_terms",
                "replayed_response")
LIST_MAX = 100


def _stamp(notes: Mapping[str, Any] | None) -> str | None:
    return None if not notes else notes.get("interlock_sik")


def settlement_fees(amount: int) -> tuple[int, int]:
    """(fees including tax, tax): 0.3% plus 18% tax on it, each rounded up, as the rail charges."""
    fee = -(-amount * 3 // 1000)
    tax = -(-fee * 18 // 100)
    return fee + tax, tax


@dataclass
class JournalEntry:
    """One entity the rail created: what the checker judges Interlock by."""

    kind: str  # "refund" | "settlement"
    id: str
    merchant_id: str
    subject: str  # the payment id, or "balance"
    amount: int
    fees: int
    stamp: str | None  # notes.interlock_sik as the rail stored it
    created_ms: int  # the true wall time at which it was applied (the rail's own clock keeps it)
    requested_amount: int  # what the request asked for (differs only under the other_terms fault)
    sent_mono_ms: int = 0  # when the request that created it reached the rail, on the simulation's true clock
    # Where the money went when it is not the subject: a payout's fund account (its subject is the payee, the
    # fund account's contact). Empty for refunds and settlements.
    target: str = ""
    # A payout's statuses as they happened, (simulated mono ms, status), and whether its request asked the rail to
    # queue it for want of balance.
    statuses: list[tuple[int, str]] = field(default_factory=list)
    queue_if_low_balance: bool = False
    # The text that went out with a payout, by where it went (narration, notes.<key>; Interlock's own notes left
    # out): what the mandate's free_text bounds.
    texts: dict[str, str] = field(default_factory=dict)


# What a money call did on the rail: the entity (and its journal entry, None when an idempotency key replayed it),
# or the refusal to answer with.
Applied = tuple[dict[str, Any], JournalEntry | None] | RailError


@dataclass
class FaultPlan:
    """How often each money-call fault and each read failure strikes (0 for a calm seed)."""

    money: dict[str, float] = field(default_factory=lambda: {"ok": 1.0})
    read_error: float = 0.0
    list_lag_ms: int = 0
    # ADR 0010's bound: an entity is in its list by the end of the call plus the reconcile delay (a late apply lands
    # after the caller's read timed out, inside that delay). A rail past it can have a settlement read as "absent"
    # and paid twice; nothing on Interlock's side can prevent that (the residual risk), so the simulated rail keeps
    # inside it unless `beyond_bounds` is set.
    call_timeout_ms: int = 2_000  # the caller's deadline: a read that times out is answered then
    list_delay_ms: int = 1_000
    beyond_bounds: bool = False
    # A refund (or payout: both keyed) is listed this much later than that bound (less than the delay itself).
    # Inside the design: the reconciler reads a keyed refund or payout early, as soon as the delay after its call's
    # recorded end, because the retry such a read may authorize carries the same idempotency key (and a refund's
    # receipt); a refusal of that retry is read
    # again, at least one more delay later, before it is believed (rail_worker/classify.py). A refund listed later
    # than both reads is finding F2 (docs/simulation.md).
    refund_list_past_bound_ms: int = 0
    # The rail keeps a refund's idempotency key only this long (None: for ever): every retry after it is a new request.
    idempotency_key_ttl_ms: int | None = None
    # The rail validates a refund's amount before its receipt: a retry of a refund that did apply (its key forgotten)
    # is refused "greater than amount captured" rather than for its reused receipt. Razorpay documents neither order.
    refund_amount_checked_first: bool = False
    # How often the bank fails or reverses a payout that started, and reverses one it had processed (the money comes
    # back; a person must be told: by its webhook, or the poller that watches a processed payout for a week).
    payout_failed: float = 0.0
    payout_reversed: float = 0.0
    payout_reversed_after_processed: float = 0.0
    # The RazorpayX account's approval workflow: each payout waits `pending` for the business's approver, who rejects
    # this share of them (a payout pending is not debited, and cannot be cancelled through the API).
    payout_approval: bool = False
    payout_rejected: float = 0.0
    # The bank's word on refunds and instant settlements (SPEC §17): when on, a refund is answered `pending` and later
    # `processed` or `failed` (the payment's refunded amount given back), a settlement answered `created` and later
    # `processed`, or `reversed` (what was settled comes back to the balance; the fees do not).
    bank_lifecycle: bool = False
    # How often a call applied on other terms has its answer lost too (a webhook or the list then tells first).
    other_terms_answer_lost: float = 0.0
    refund_failed: float = 0.0
    settlement_reversed: float = 0.0


class SimRail:
    """One merchant account's rail. `for_caller(name)` gives an actor its own client view (for partitions)."""

    def __init__(self, sched: Scheduler, merchant_id: str, plan: FaultPlan, *, balance: int,
                 account_number: str = "", banking_balance: int = 0) -> None:  # fmt: skip
        # Proxy mode (docs/proxy.md): set, the rail is an upstream MCP server serving these tools — a refund is
        # sent without its idempotency key (the tool has no place for one: the stamp rides in receipt and notes),
        # and there are no payouts, refused the way rails.mcp_upstream refuses them.
        self.upstream_tools: list[Tool] | None = None
        self.sched = sched
        self.merchant_id = merchant_id
        self.plan = plan
        self.balance = balance
        self.payments: dict[str, dict[str, Any]] = {}
        self.refunds: list[dict[str, Any]] = []  # newest last
        self.foreign_refunded: dict[str, int] = {}  # payment id -> refunded by others (simulation.crowd)
        self.settlements: list[dict[str, Any]] = []
        self.journal: list[JournalEntry] = []
        # Every stamped answer a money call was given: (stamp, entity id, caller process, its incarnation).
        self.deliveries: list[tuple[str, str, str, int]] = []
        self.visible_at: dict[str, int] = {}  # entity id → simulated mono ms from which lists show it
        # X-Refund-Idempotency key → (refund id, the mono instant the rail forgets it, None: never)
        self.idempotency: dict[str, tuple[str, int | None]] = {}
        self.partitioned_until: dict[str, int] = {}  # caller process → mono ms
        # RazorpayX: the business account, its payees and payouts, and X-Payout-Idempotency's keys
        self.account_number = account_number
        self.banking_balance = banking_balance
        self.fund_accounts: dict[str, dict[str, Any]] = {}
        self.payouts: list[dict[str, Any]] = []
        # Payouts sent with queue_if_low_balance, by id, with when their request reached the rail: no admission bounds
        # them by the balance (the mandate lets the rail queue them), so one may take room another's admission kept.
        self._queueing_sent: dict[str, int] = {}
        self.payout_keys: dict[str, tuple[str, dict[str, Any] | RailError]] = {}  # key → (body, first answer)
        self.payout_keys_busy: set[str] = set()  # received, not applied yet: a request under it is answered 409
        self.notes_refusals: list[dict[str, Any]] = []  # money calls refused for their notes (Razorpay's limits)
        self.balance_refusals: list[dict[str, Any]] = []  # payouts refused for the balance, with the account then
        self._created_statuses: dict[str, list[tuple[int, str]]] = {}  # a payout's statuses before it is journalled
        # Told of every entity created and every status it moves to (kind, entity, status): the webhooks.
        self.events: Callable[[str, dict[str, Any], str], None] = lambda kind, entity, status: None
        self._ids = itertools.count(1)
        # Given the fault drawn for a money request that has just left, returns the one it meets instead.
        self.on_send: Callable[[str], str] | None = None
        self._shown_by = 0  # the instant the entity of the call being applied must be listed by (settlements)
        self._sent_mono_ms = 0  # when the request being applied reached the rail

    # -- set-up ----------------------------------------------------------------------------------------------

    def add_payment(self, payment_id: str, amount: int) -> None:
        self.payments[payment_id] = {"id": payment_id, "entity": "payment", "amount": amount, "currency": "INR",
                                     "status": "captured", "captured": True, "amount_refunded": 0,
                                     "refund_status": None, "notes": [], "created_at": 0}  # fmt: skip

    def payment_amounts(self) -> dict[str, int]:
        """What each payment leaves for Interlock's refunds: captured, less what others refunded on it."""
        return {pid: int(raw["amount"]) - self.foreign_refunded.get(pid, 0) for pid, raw in self.payments.items()}

    def add_foreign_refund(self, payment_id: str, amount: int) -> None:
        """Someone else's refund (the dashboard's): unstamped, listed at once, when the payment has room for it."""
        payment = self.payments[payment_id]
        if int(payment["amount"]) - int(payment["amount_refunded"]) < amount:
            return
        raw = {"id": f"rfnd_{next(self._ids):014d}", "entity": "refund", "amount": amount, "currency": "INR",
               "payment_id": payment_id, "receipt": None, "notes": [], "status": "processed",
               "created_at": self.sched.clock.now_ms() // 1000}  # fmt: skip
        payment["amount_refunded"] = int(payment["amount_refunded"]) + amount
        self.foreign_refunded[payment_id] = self.foreign_refunded.get(payment_id, 0) + amount
        self.refunds.append(raw)

    def add_foreign_settlement(self, amount: int) -> None:
        """Someone else's instant settlement: unstamped, listed at once."""
        if amount > self.balance:
            return
        fees, tax = settlement_fees(amount)
        self.balance -= amount
        self.settlements.append({
            "id": f"setlod_{next(self._ids):014d}", "entity": "settlement.ondemand", "amount_requested": amount,
            "amount_settled": amount - fees, "amount_pending": 0, "amount_reversed": 0, "fees": fees, "tax": tax,
            "currency": "INR", "settle_full_balance": False, "status": "processed", "description": None, "notes": [],
            "created_at": self.sched.clock.now_ms() // 1000,
        })  # fmt: skip

    # -- the Rail protocol -----------------------------------------------------------------------------------

    def fetch_payment(self, payment_id: str) -> Payment:
        self._read("payment.fetch")
        raw = self.payments.get(payment_id)
        if raw is None:
            raise RailError(RailErrorKind.REJECTED, "The id provided does not exist", method="GET",
                            path=f"/v1/payments/{payment_id}", http_status=400, code="BAD_REQUEST_ERROR")  # fmt: skip
        return Payment.from_raw(dict(raw))

    def fetch_refund(self, refund_id: str) -> Refund:
        self._read("refund.fetch")
        for raw in self.refunds:
            if raw["id"] == refund_id:
                return Refund.from_raw(dict(raw))
        raise RailError(RailErrorKind.REJECTED, "The id provided does not exist", method="GET",
                        path=f"/v1/refunds/{refund_id}", http_status=400, code="BAD_REQUEST_ERROR")  # fmt: skip

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        self._read("settlement.fetch")
        for raw in self.settlements:
            if raw["id"] == settlement_id:
                return Settlement.from_raw(dict(raw))
        raise RailError(RailErrorKind.REJECTED, "The id provided does not exist", method="GET",
                        path=f"/v1/settlements/ondemand/{settlement_id}", http_status=400,
                        code="BAD_REQUEST_ERROR")  # fmt: skip

    def fetch_balance(self) -> Balance:
        if self.upstream_tools is not None and "fetch_balance" not in {t.name for t in self.upstream_tools}:
            raise self._not_found("fetch_balance")  # razorpay-mcp-server has no balance tool
        self._read("balance.fetch")
        return Balance.from_raw({"balance": self.balance, "currency": "INR"})

    def list_refunds_for_payment(self, payment_id: str, *, count: int = 10, skip: int = 0) -> Page[Refund]:
        self._read("refunds.list")
        rows = [r for r in self.refunds if r["payment_id"] == payment_id]
        return self._page(Refund, rows, count, skip)

    def list_refunds(self, *, count: int = 10, skip: int = 0) -> Page[Refund]:
        """Every refund of the account, newest first (GET /v1/refunds: what a restore pages, ops/restore.py)."""
        self._read("refunds.list")
        return self._page(Refund, self.refunds, count, skip)

    def list_instant_settlements(self, *, count: int = 10, skip: int = 0) -> Page[Settlement]:
        self._read("settlements.list")
        return self._page(Settlement, self.settlements, count, skip)

        # -- RazorpayX payouts (SPEC §18), from the account `account_number` -----------------------------------------

    def list_tools(self) -> list[Tool]:
        """The upstream MCP server's manifest (proxy mode only): what G6 judges the mandate's pins against."""
        self._read("tools.list")
        if self.upstream_tools is None:
            raise self._not_found("tools/list")
        return list(self.upstream_tools)

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount:
        self._no_payouts("fetch_fund_account")
        self._read("fund_account.fetch")
        raw = self.fund_accounts.get(fund_account_id)
        if raw is None:
            raise self._not_found(f"/v1/fund_accounts/{fund_account_id}")
        return FundAccount.from_raw(dict(raw))

    def fetch_banking_balance(self, account_number: str) -> BankingBalance:
        self._no_payouts("fetch_banking_balance")
        self._read("banking_balance.fetch")
        self._account(account_number)
        return BankingBalance.from_raw({"account_number": account_number, "currency": "INR",
                                        "amount": self.banking_balance})  # fmt: skip

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = 10, skip: int = 0) -> Page[Payout]:  # fmt: skip
        self._no_payouts("list_payouts")
        self._read("payouts.list")
        self._account(account_number)
        rows = [p for p in self.payouts if (reference_id is None or p.get("reference_id") == reference_id)
                and (status is None or p["status"] == status)]  # fmt: skip
        return self._page(Payout, rows, count, skip)

    def fetch_payout(self, payout_id: str) -> Payout:
        self._no_payouts("fetch_payout")
        self._read("payout.fetch")
        for raw in self.payouts:
            if raw["id"] == payout_id:
                return Payout.from_raw(dict(raw))
        raise self._not_found(f"/v1/payouts/{payout_id}")

    def create_payout(self, *, account_number: str, fund_account_id: str, amount: int, currency: str, mode: str,
                      purpose: str, queue_if_low_balance: bool, reference_id: str, narration: str | None,
                      notes: Mapping[str, Any] | None, idempotency_key: str) -> Payout:  # fmt: skip
        self._no_payouts("create_payout")
        body = {"account_number": account_number, "fund_account_id": fund_account_id, "amount": amount,
                "currency": currency, "mode": mode, "purpose": purpose, "queue_if_low_balance": queue_if_low_balance,
                "reference_id": reference_id, "narration": narration, "notes": dict(notes or {})}  # fmt: skip
        digest = json.dumps(body, sort_keys=True)

        def apply(terms_amount: int, fault: str) -> Applied:
            refused = self._notes_refused(notes, "/v1/payouts")
            if refused is not None:
                return refused
            # RazorpayX keeps the first answer to a key, a refusal too, and replays it to the same body (SPEC §18).
            answer = self._payout_answer(body, terms_amount, queue_if_low_balance)
            self.payout_keys[idempotency_key] = (digest, answer)
            self.payout_keys_busy.discard(idempotency_key)
            if isinstance(answer, RailError):
                return answer
            return answer, self._journal("payout", answer["id"], self._payee_of(fund_account_id), terms_amount,
                                         0, notes, amount, target=fund_account_id,
                                         queue=queue_if_low_balance)  # fmt: skip

        return Payout.from_raw(self._money("payout.create", amount, apply, _stamp(notes),
                                           key=(idempotency_key, digest)))  # fmt: skip

    def cancel_payout(self, payout_id: str) -> Payout:
        """Only a `queued` payout can be cancelled (nothing was debited for it)."""
        self._no_payouts("cancel_payout")
        self._read("payout.cancel")
        raw = next((p for p in self.payouts if p["id"] == payout_id), None)
        if raw is None:
            raise self._not_found(f"/v1/payouts/{payout_id}/cancel")
        if raw["status"] != "queued":
            raise self._rejected(f"Only queued payouts can be cancelled; this payout is {raw['status']}.",
                                 "/v1/payouts/cancel")  # fmt: skip
        self._move_payout(raw, "cancelled")
        return Payout.from_raw(dict(raw))

    # -- set-up of payees, and the payouts' own life ----------------------------------------------------------

    def add_fund_account(self, fund_account_id: str, contact_id: str, account_type: str) -> None:
        bank = {"bank_account": {"ifsc": "HDFC0000001", "account_number": "50100000000001"}}
        details: dict[str, Any] = bank if account_type == "bank_account" else {"vpa": {"address": f"{contact_id}@upi"}}
        self.fund_accounts[fund_account_id] = {"id": fund_account_id, "entity": "fund_account",
                                               "contact_id": contact_id, "account_type": account_type,
                                               "active": True, "created_at": 0, **details}  # fmt: skip

    def _no_payouts(self, what: str) -> None:
        if self.upstream_tools is not None:
            raise RailError(RailErrorKind.REJECTED, NO_PAYOUTS, method="MCP", path=what, http_status=404,
                            description=NO_PAYOUTS)  # fmt: skip

    def _payee_of(self, fund_account_id: str) -> str:
        return str(self.fund_accounts[fund_account_id]["contact_id"])

    def _account(self, account_number: str) -> None:
        if account_number != self.account_number:
            raise self._rejected("The account number is invalid", "/v1/banking_balances")

    def _payout_answer(self, body: Mapping[str, Any], amount: int, queue: bool) -> dict[str, Any] | RailError:
        """A new payout on *body*'s terms (the amount as applied), or the rail's refusal of it."""
        fund_account = self.fund_accounts.get(str(body["fund_account_id"]))
        if fund_account is None or not fund_account["active"]:
            return self._rejected("Payouts cannot be created on an inactive fund account", "/v1/payouts")
        cost = amount + PAYOUT_FEE
        if cost > self.banking_balance and not queue:
            # What the checker needs to judge the admission's balance re-check: nothing else debits this account,
            # so such a refusal means a payout was admitted that the balance, less what was in motion, could not
            # pay — unless payouts queued on the rail took the room (they are not debited until they start).
            waiting = sum(int(p["amount"]) + PAYOUT_FEE for p in self.payouts if p["status"] in ("queued", "pending"))
            # ... or unless a queueing mandate's payout, sent after this request and so not in motion when it was
            # admitted, was debited first: an admission counts it in motion only if it was admitted before.
            overtaken = sum(int(p["amount"]) + PAYOUT_FEE for p in self.payouts
                            if self._queueing_sent.get(p["id"], -1) >= self._sent_mono_ms
                            and p["status"] in ("processing", "processed"))  # fmt: skip
            self.balance_refusals.append({"stamp": _stamp(body["notes"]), "amount": amount, "cost": cost,
                                          "balance": self.banking_balance, "queued": waiting,
                                          "overtaken_by_queueing": overtaken,
                                          "mono_ms": self._now(), "at_ms": self.sched.clock.true_ms()})  # fmt: skip
            return self._rejected("Your account does not have enough balance to carry out the payout operation.",
                                  "/v1/payouts")  # fmt: skip
        raw: dict[str, Any] = {
            "id": f"pout_{next(self._ids):014d}", "entity": "payout", "fund_account_id": body["fund_account_id"],
            "amount": amount, "currency": body["currency"], "notes": dict(body["notes"]) or [], "fees": 0, "tax": 0,
            "status": "queued", "utr": None, "mode": body["mode"], "purpose": body["purpose"],
            "reference_id": body["reference_id"], "narration": body["narration"],
            "created_at": self.sched.clock.true_ms() // 1000,
        }  # fmt: skip
        self.payouts.append(raw)
        if queue:
            self._queueing_sent[raw["id"]] = self._sent_mono_ms
        if self.plan.payout_approval:  # the account's approval workflow: pending until a person of the business decides
            raw["status"] = "pending"
            self._status_log(raw)
            self.events("payout", raw, "pending")
            self.sched.at(self._now() + self.sched.rng.randint(1_000, 10_000), lambda: self._approved(raw, queue))
            return raw
        self._status_log(raw)
        self.events("payout", raw, "queued")
        if cost <= self.banking_balance:
            self._start_payout(raw)
        return raw

    def _approved(self, raw: dict[str, Any], queue: bool) -> None:
        """The business's approver decides a pending payout: rejected, or it goes on as a new one would."""
        if raw["status"] != "pending":
            return
        cost = int(raw["amount"]) + PAYOUT_FEE
        if self.sched.rng.random() < self.plan.payout_rejected:
            self._move_payout(raw, "rejected")
        elif cost <= self.banking_balance:
            self._move_payout(raw, "queued")
            self._start_payout(raw)
        else:
            self._move_payout(raw, "queued" if queue else "failed")

    def _start_payout(self, raw: dict[str, Any]) -> None:
        """queued -> processing: the amount and the fee leave the balance; the bank answers later."""
        self.banking_balance -= int(raw["amount"]) + PAYOUT_FEE
        raw["fees"], raw["tax"] = PAYOUT_FEE, PAYOUT_TAX
        self._move_payout(raw, "processing")
        roll, later = self.sched.rng.random(), self.sched.rng.randint(1_000, 20_000)
        end = ("failed" if roll < self.plan.payout_failed else
               "reversed" if roll < self.plan.payout_failed + self.plan.payout_reversed else "processed")  # fmt: skip
        self.sched.at(self._now() + later, lambda: self._bank(raw, end))

    def _bank(self, raw: dict[str, Any], status: str) -> None:
        if raw["status"] != "processing" and not (raw["status"] == "processed" and status == "reversed"):
            return
        self._move_payout(raw, status)
        if status == "processed" and self.sched.rng.random() < self.plan.payout_reversed_after_processed:
            self.sched.at(self._now() + self.sched.rng.randint(1_000, 30_000), lambda: self._bank(raw, "reversed"))
        if status in ("failed", "reversed"):  # the amount and the fee come back, and queued payouts may start
            self.banking_balance += int(raw["amount"]) + PAYOUT_FEE
            raw["fees"] = raw["tax"] = 0
            for queued in [p for p in self.payouts if p["status"] == "queued"]:  # FIFO, one that fits lets the next go
                if int(queued["amount"]) + PAYOUT_FEE <= self.banking_balance:
                    self._start_payout(queued)

    def _bank_later(self, kind: str, raw: dict[str, Any], status: str) -> None:
        """A refund's or settlement's final status at the bank, 1-20 simulated seconds after it was accepted."""

        def final() -> None:
            self.sched.counters.fault(f"{kind}_{raw['status']}_to_{status}")
            if kind == "refund" and status == "failed":
                payment = self.payments[raw["payment_id"]]
                payment["amount_refunded"] = int(payment["amount_refunded"]) - int(raw["amount"])
                payment["refund_status"] = "partial" if payment["amount_refunded"] else None
            elif kind == "settlement":
                settled = int(raw["amount_requested"]) - int(raw["fees"])
                raw["amount_pending"] = 0
                if status == "reversed":
                    raw["amount_reversed"] = settled
                    self.balance += settled
                else:
                    raw["amount_settled"] = settled
            raw["status"] = status
            self._status_log(raw)
            self.events(kind, raw, status)

        self.sched.at(self._now() + self.sched.rng.randint(1_000, 20_000), final)

    def _move_payout(self, raw: dict[str, Any], status: str) -> None:
        assert status in PAYOUT_TRANSITIONS.get(raw["status"], ()), (raw["status"], status)
        self.sched.counters.fault(f"payout_{raw['status']}_to_{status}")
        raw["status"] = status
        self._status_log(raw)
        self.events("payout", raw, status)

    def _status_log(self, raw: dict[str, Any]) -> None:
        entry = next((e for e in self.journal if e.id == raw["id"]), None)  # None while it is being created
        if entry is not None:
            entry.statuses.append((self._now(), raw["status"]))
            entry.fees = int(raw.get("fees") or 0) if entry.kind == "payout" else entry.fees
        else:
            self._created_statuses.setdefault(raw["id"], []).append((self._now(), raw["status"]))

    def _not_found(self, path: str) -> RailError:
        return RailError(RailErrorKind.REJECTED, "The id provided does not exist", method="GET", path=path,
                         http_status=400, code="BAD_REQUEST_ERROR",
                         description="The id provided does not exist")  # fmt: skip

    def create_refund(self, payment_id: str, amount: int | None, *, speed: str | None = None,
                      notes: Mapping[str, Any] | None, receipt: str | None,
                      idempotency_key: str | None) -> Refund:  # fmt: skip
        if self.upstream_tools is not None:
            idempotency_key = None  # the upstream's create_refund has no idempotency key (rails.mcp_upstream)

        def apply(terms_amount: int, fault: str) -> Applied:
            refused = self._notes_refused(notes, "/refund")
            if refused is not None:
                return refused
            payment = self.payments.get(payment_id)
            if payment is None:
                return self._rejected("The id provided does not exist", "/v1/payments/refund")
            refund_id, forget_at = self.idempotency.get(idempotency_key or "", (None, None))
            if refund_id is not None and fault != "key_forgotten" and (forget_at is None or self._now() < forget_at):
                return next(r for r in self.refunds if r["id"] == refund_id), None
            wanted = payment["amount"] - payment["amount_refunded"] if amount is None else terms_amount
            too_much = wanted <= 0 or wanted > payment["amount"] - payment["amount_refunded"]
            if too_much and self.plan.refund_amount_checked_first:
                return self._rejected("The refund amount provided is greater than amount captured", "/refund")
            if receipt is not None and any(r["payment_id"] == payment_id and r.get("receipt") == receipt
                                           for r in self.refunds):  # fmt: skip
                return self._rejected("The receipt has already been used for another refund", "/refund")
            if too_much:
                return self._rejected("The refund amount provided is greater than amount captured", "/refund")
            raw: dict[str, Any] = {
                "id": f"rfnd_{next(self._ids):014d}", "entity": "refund", "amount": wanted, "currency": "INR",
                "payment_id": payment_id, "receipt": receipt, "notes": dict(notes or {}) or [], "status": "processed",
                "created_at": self.sched.clock.true_ms() // 1000,
            }  # fmt: skip
            payment["amount_refunded"] = int(payment["amount_refunded"]) + wanted
            payment["refund_status"] = "full" if payment["amount_refunded"] == payment["amount"] else "partial"
            self.refunds.append(raw)
            if self.plan.bank_lifecycle:
                raw["status"] = "pending"
                self._bank_later("refund", raw, "failed" if self.sched.rng.random() < self.plan.refund_failed
                                 else "processed")  # fmt: skip
            self.events("refund", raw, raw["status"])
            if idempotency_key is not None:
                ttl = self.plan.idempotency_key_ttl_ms
                self.idempotency[idempotency_key] = raw["id"], None if ttl is None else self._now() + ttl
            return raw, self._journal("refund", raw["id"], payment_id, wanted, 0, notes, amount or wanted)

        return Refund.from_raw(self._money("refund.create", amount, apply, _stamp(notes)))

    def create_instant_settlement(self, amount: int | None = None, *, settle_full_balance: bool = False,
                                  description: str | None = None,
                                  notes: Mapping[str, Any] | None) -> Settlement:  # fmt: skip
        def apply(terms_amount: int, fault: str) -> Applied:
            refused = self._notes_refused(notes, "/settlements")
            if refused is not None:
                return refused
            wanted = self.balance if settle_full_balance or amount is None else terms_amount
            if wanted <= 0 or wanted > self.balance:
                return self._rejected("The amount requested is more than the settlement balance", "/settlements")
            fees, tax = settlement_fees(wanted)
            raw: dict[str, Any] = {
                "id": f"setlod_{next(self._ids):014d}", "entity": "settlement.ondemand", "amount_requested": wanted,
                "amount_settled": wanted - fees, "amount_pending": 0, "amount_reversed": 0, "fees": fees, "tax": tax,
                "currency": "INR", "settle_full_balance": settle_full_balance, "status": "processed",
                "description": description, "notes": dict(notes or {}) or [],
                "created_at": self.sched.clock.true_ms() // 1000,
            }  # fmt: skip
            self.balance -= wanted
            self.settlements.append(raw)
            if self.plan.bank_lifecycle:
                raw["status"], raw["amount_pending"], raw["amount_settled"] = "created", wanted - fees, 0
                reversed_ = self.sched.rng.random() < self.plan.settlement_reversed
                self._bank_later("settlement", raw, "reversed" if reversed_ else "processed")
            self.events("settlement", raw, raw["status"])
            return raw, self._journal("settlement", raw["id"], "balance", wanted, fees, notes, amount or wanted)

        return Settlement.from_raw(self._money("settlement.create", amount, apply, _stamp(notes)))

    def close(self) -> None:
        return None

    # -- faults ----------------------------------------------------------------------------------------------

    def partition(self, process: str, until_mono_ms: int) -> None:
        self.partitioned_until[process] = until_mono_ms

    def _now(self) -> int:
        return self.sched.clock.mono_ms

    def _caller(self) -> str:
        actor = self.sched.current
        return actor.process.name if actor is not None else "-"

    def _unreachable(self) -> bool:
        return self.partitioned_until.get(self._caller(), -1) > self.sched.clock.mono_ms

    def _read(self, what: str) -> None:
        self.sched.point(f"rail.{what}")
        if self._unreachable():
            raise RailError(RailErrorKind.NOT_SENT, "connect timed out (partitioned)", method="GET", path=what)
        if self.plan.read_error and self.sched.rng.random() < self.plan.read_error:
            self.sched.counters.fault("rail_read_error")
            raise RailError(RailErrorKind.AMBIGUOUS, "502 Bad Gateway", method="GET", path=what, http_status=502)

    def _money(self, what: str, amount: int | None, apply: Callable[[int, str], Applied], stamp: str | None, *,
               key: tuple[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
        self.sched.point(f"rail.{what}.send")
        try:
            check_send_window()  # the last check before the request's first byte
        except SendWindowClosed as exc:
            raise RailError(RailErrorKind.NOT_SENT, str(exc), method="POST", path=what) from exc
        if self._unreachable():
            raise RailError(RailErrorKind.NOT_SENT, "connect timed out (partitioned)", method="POST", path=what)
        fault = self._draw_fault()
        if self.on_send is not None:  # the request has left: its machine may be lost now (simulation.machine_loss)
            fault = self.on_send(fault)
        self._shown_by = self.sched.clock.mono_ms + self._delay() - 50  # ADR 0010: the call ends now, listed by then
        sent = self._sent_mono_ms = self.sched.clock.mono_ms
        if fault == "not_applied":
            raise RailError(RailErrorKind.NOT_SENT, "connection refused", method="POST", path=what)
        if fault == "error_not_applied":
            raise RailError(RailErrorKind.AMBIGUOUS, "500 Internal Server Error", method="POST", path=what,
                            http_status=500)  # fmt: skip
        if key is not None:
            seen = self._keyed(what, *key)
            if seen is not None:
                self.sched.point(f"rail.{what}.answer")
                if isinstance(seen, RailError):
                    raise seen
                if fault == "lost_answer":
                    raise RailError(RailErrorKind.AMBIGUOUS, "504 Gateway Time-out", method="POST", path=what,
                                    http_status=504)  # fmt: skip
                return self._deliver(seen, stamp)
            if fault == "key_forgotten":
                fault = "ok"  # RazorpayX keeps payout keys (SPEC §18); the design trusts it to
        terms = amount or 0
        if fault == "other_terms" and amount is not None:
            terms = max(amount - 100, 1)  # applied on other terms than asked, with our stamp on it
        if fault == "late_apply":
            if key is not None:
                self.payout_keys_busy.add(key[0])
            # The caller's read times out at its deadline; the rail applies the request after that, inside the delay —
            # counted on the rail's clock from when the request arrived, however long the caller itself then stalls.
            deadline = self.sched.clock.mono_ms + self.plan.call_timeout_ms
            shown_by = deadline + self._delay() - 50
            landing = deadline + self.sched.rng.randint(1, max(self._delay() - 60, 1))
            self.sched.at(landing, lambda: self._late(apply, terms, fault, shown_by, sent))
            self.sched.sleep(self.plan.call_timeout_ms)
            raise RailError(RailErrorKind.AMBIGUOUS, "read timed out", method="POST", path=what)
        applied = apply(terms, fault)
        self.sched.point(f"rail.{what}.answer")
        if isinstance(applied, RailError):
            raise applied
        raw = applied[0]
        if fault == "replayed_response":
            mine = {"refund": self.refunds, "payout": self.payouts}.get(str(raw.get("entity")), self.settlements)
            others = [r for r in mine if r is not raw]
            if others:
                return self._deliver(self.sched.rng.choice(others), stamp)  # a 200 carrying someone else's entity
        if fault == "lost_answer" or fault == "other_terms" and self.plan.other_terms_answer_lost and (
                self.sched.rng.random() < self.plan.other_terms_answer_lost):  # fmt: skip
            raise RailError(RailErrorKind.AMBIGUOUS, "504 Gateway Time-out", method="POST", path=what, http_status=504)
        return self._deliver(raw, stamp)

    def _keyed(self, what: str, key: str, digest: str) -> dict[str, Any] | RailError | None:
        """X-Payout-Idempotency on receipt: the first answer to the same body again, a 400 naming the key for
        another body, a 409 while the first request is still being applied; None for a key not seen."""
        if key in self.payout_keys_busy:
            self.sched.counters.fault("payout_key_in_progress")
            return RailError(RailErrorKind.AMBIGUOUS, "409 request with this idempotency key is in progress",
                             method="POST", path=what, http_status=409)  # fmt: skip
        first = self.payout_keys.get(key)
        if first is None:
            return None
        if first[0] != digest:
            self.sched.counters.fault("payout_key_other_body")
            return RailError(RailErrorKind.AMBIGUOUS, "400 idempotency key used with another request body",
                             method="POST", path=what, http_status=400, code="BAD_REQUEST_ERROR",
                             field="X-Payout-Idempotency")  # fmt: skip
        self.sched.counters.fault("payout_key_replayed")
        return first[1] if isinstance(first[1], RailError) else dict(first[1])

    def _deliver(self, raw: dict[str, Any], stamp: str | None) -> dict[str, Any]:
        """The answer leaves the rail for its caller; one carrying the caller's own stamp is journalled as given."""
        actor = self.sched.current
        if stamp is not None and actor is not None and _stamp(raw.get("notes") or None) == stamp:
            self.deliveries.append((stamp, str(raw["id"]), actor.process.name, actor.process.incarnation))
        return dict(raw)

    def _late(self, apply: Callable[[int, str], Any], terms: int, fault: str, shown_by: int, sent: int) -> None:
        self.sched.note(f"rail {self.merchant_id} applies late")
        self._shown_by, self._sent_mono_ms = shown_by, sent
        apply(terms, fault)

    def _delay(self) -> int:
        return self.plan.list_delay_ms * (4 if self.plan.beyond_bounds else 1)

    def _draw_fault(self) -> str:
        roll, acc = self.sched.rng.random(), 0.0
        for kind in MONEY_FAULTS:
            acc += self.plan.money.get(kind, 0.0)
            if roll < acc:
                if kind != "ok":
                    self.sched.counters.fault(f"rail_{kind}")
                return kind
        return "ok"

    def _notes_refused(self, notes: Mapping[str, Any] | None, path: str) -> RailError | None:
        """Razorpay's limits on an entity's notes (SPEC §10): at most RAIL_MAX_NOTES keys, each key and value at most
        MAX_NOTE_CHARS characters; a request past them is a 400, and nothing is created."""
        notes = dict(notes or {})
        too_long = [k for k, v in notes.items()
                    if not 0 < len(str(k)) <= MAX_NOTE_CHARS or len(str(v)) > MAX_NOTE_CHARS]  # fmt: skip
        if len(notes) <= RAIL_MAX_NOTES and not too_long:
            return None
        self.notes_refusals.append({"stamp": _stamp(notes), "path": path, "notes": len(notes), "too_long": too_long})
        return self._rejected(f"notes: at most {RAIL_MAX_NOTES} keys of at most {MAX_NOTE_CHARS} characters", path)

    def _rejected(self, description: str, path: str) -> RailError:
        return RailError(RailErrorKind.REJECTED, description, method="POST", path=path, http_status=400,
                         code="BAD_REQUEST_ERROR", description=description)  # fmt: skip

    def _journal(self, kind: str, entity_id: str, subject: str, amount: int, fees: int,
                 notes: Mapping[str, Any] | None, requested: int, *, target: str = "",
                 queue: bool = False) -> JournalEntry:  # fmt: skip
        entry = JournalEntry(kind, entity_id, self.merchant_id, subject, amount, fees,
                             None if not notes else notes.get("interlock_sik"), self.sched.clock.true_ms(), requested,
                             self._sent_mono_ms, target, queue_if_low_balance=queue)  # fmt: skip
        if kind == "payout":
            raw = next(p for p in self.payouts if p["id"] == entity_id)
            entry.statuses = self._created_statuses.pop(entity_id, [(self._now(), raw["status"])])
            entry.fees = int(raw["fees"])
            if isinstance(raw.get("narration"), str):
                entry.texts["narration"] = raw["narration"]
            entry.texts.update((f"notes.{k}", v) for k, v in dict(raw.get("notes") or {}).items()
                               if isinstance(v, str) and not k.startswith("interlock_"))  # fmt: skip
        else:
            raw = next(r for r in (self.refunds if kind == "refund" else self.settlements) if r["id"] == entity_id)
            entry.statuses = [(self._now(), raw["status"])]
        self.journal.append(entry)
        lag = self.sched.rng.randint(0, self.plan.list_lag_ms) if self.plan.list_lag_ms else 0
        if not self.plan.beyond_bounds:
            # Applied late or listed late, it shows by the call's deadline plus the reconcile delay after it was sent.
            # (A refund listed later still cannot be paid twice — its retry carries the same key — but the ledger
            # can then be told "absent" by every pass until its retries run out: see docs/simulation.md.)
            lag = max(0, min(lag, self._shown_by - self.sched.clock.mono_ms))
        if kind in ("refund", "payout") and self.plan.refund_list_past_bound_ms:  # keyed: its retry is replayed
            lag = max(lag, self._shown_by + self.plan.refund_list_past_bound_ms - self.sched.clock.mono_ms)
        self.visible_at[entity_id] = self.sched.clock.mono_ms + lag
        return entry

    def _page(self, model: Any, rows: list[dict[str, Any]], count: int, skip: int) -> Page[Any]:
        if count > LIST_MAX:
            raise self._rejected(f"count must be at most {LIST_MAX}", "/list")
        now = self.sched.clock.mono_ms
        visible = [r for r in reversed(rows) if self.visible_at.get(r["id"], 0) <= now]  # newest first
        items = [model.from_raw(dict(r)) for r in visible[skip: skip + count]]
        return Page[model](items=items, requested_count=count, skip=skip)  # type: ignore[valid-type]
