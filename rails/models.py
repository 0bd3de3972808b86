"""Typed views of Razorpay entities. Each keeps the raw dict it was read from (`raw`), so nothing the
rail said is lost when a later caller needs a field these models do not name."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from interlock.canonical import canonical_hash


class RailEntity(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    raw: dict[str, Any] = Field(default_factory=dict, repr=False, exclude=True)

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> Any:
        return cls.model_validate({**raw, "raw": raw})


def _notes(value: Any) -> Any:
    # Razorpay serialises empty notes as [] (SPEC §14); both spellings mean "no notes".
    if value is None or value == []:
        return {}
    return value


class Payment(RailEntity):
    id: str
    amount: int
    currency: str
    status: str
    amount_refunded: int = 0
    refund_status: str | None = None
    captured: bool = False
    created_at: int | None = None
    notes: dict[str, Any] = Field(default_factory=dict)
    # Whose payment this is (Razorpay serves both): what a task's order_id / customer_id is checked against.
    order_id: str | None = None
    customer_id: str | None = None

    @field_validator("notes", mode="before")
    @classmethod
    def _empty_notes(cls, value: Any) -> Any:
        return _notes(value)

    @property
    def refundable(self) -> int:
        """What is still refundable on the rail right now (ignores anything Interlock has in flight)."""
        return max(0, self.amount - self.amount_refunded)


class Stamped(RailEntity):
    notes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("notes", mode="before")
    @classmethod
    def _empty_notes(cls, value: Any) -> Any:
        return _notes(value)

    @property
    def stamp_sik(self) -> str | None:
        sik = self.notes.get("interlock_sik")
        return None if sik is None else str(sik)

    def carries_stamp(self, sik: str) -> bool:
        """True when this entity was created for *sik*: notes.interlock_sik or receipt "ilk_"+sik (SPEC §4, §9)."""
        return self.stamp_sik == sik or getattr(self, "receipt", None) == "ilk_" + sik


class Refund(Stamped):
    id: str
    amount: int
    currency: str
    payment_id: str
    status: str
    receipt: str | None = None
    speed_requested: str | None = None
    speed_processed: str | None = None
    created_at: int | None = None


class Settlement(Stamped):
    id: str
    amount_requested: int
    amount_settled: int
    fees: int
    tax: int
    currency: str
    status: str
    amount_pending: int = 0
    amount_reversed: int = 0
    settle_full_balance: bool = False
    description: str | None = None
    created_at: int | None = None


class Payout(Stamped):
    """A RazorpayX payout (SPEC §18). `reference_id` carries our stamp as "ilk_"+SIK, beside notes.interlock_sik;
    fees and tax are shown once the payout is processing."""

    id: str
    fund_account_id: str
    amount: int
    currency: str
    status: str
    mode: str | None = None
    purpose: str | None = None
    reference_id: str | None = None
    narration: str | None = None
    fees: int = 0
    tax: int = 0
    utr: str | None = None
    status_details: dict[str, Any] | None = None
    created_at: int | None = None

    def carries_stamp(self, sik: str) -> bool:
        return self.stamp_sik == sik or self.reference_id == "ilk_" + sik


class FundAccount(RailEntity):
    """Where a payout goes: a contact's bank account or UPI id. Who the payee is comes from here, never from the
    agent (ADR 0028)."""

    id: str
    contact_id: str
    account_type: str
    active: bool
    bank_account: dict[str, Any] | None = None
    vpa: dict[str, Any] | None = None
    created_at: int | None = None

    def shown(self) -> dict[str, Any]:
        """The fund account as an approver is shown it (ADR 0034): the name on the bank account, its number masked
        to the last four digits, IFSC and bank; or the VPA; and the contact. All of it as the rail reports it."""
        view: dict[str, Any] = {"fund_account_id": self.id, "contact_id": self.contact_id,
                                "account_type": self.account_type, "active": self.active}  # fmt: skip
        if self.bank_account is not None:
            number = str(self.bank_account.get("account_number") or "")
            view.update(name=self.bank_account.get("name"), account_number="x" * max(len(number) - 4, 0) + number[-4:],
                        ifsc=self.bank_account.get("ifsc"), bank_name=self.bank_account.get("bank_name"))  # fmt: skip
        if self.vpa is not None:
            view["vpa"] = self.vpa.get("address")
        return view

    @property
    def digest(self) -> str:
        """A short digest of who and where this payee is, unmasked: an approver who adds the payee names it, and the
        release compares it with the rail's answer then (ADR 0034). `active` is left out: it is checked apart."""
        bank = self.bank_account or {}
        return canonical_hash({
            "id": self.id, "contact_id": self.contact_id, "account_type": self.account_type,
            "bank_account": {k: bank.get(k) for k in ("name", "account_number", "ifsc")} if self.bank_account else None,
            "vpa": (self.vpa or {}).get("address"),
        })[:16]  # fmt: skip


class BankingBalance(RailEntity):
    """One RazorpayX account's balance (`GET /v1/banking_balances`)."""

    account_number: str
    currency: str
    amount: int
    available_amount: int | None = None
    account_type: str | None = None
    refreshed_at: int | None = None


class Balance(RailEntity):
    balance: int
    currency: str


T = TypeVar("T", bound=RailEntity)


class Page(BaseModel, Generic[T]):
    """One page of a list. `exhausted` is True on a short page: there is nothing after it (SPEC §9)."""

    model_config = ConfigDict(frozen=True)

    items: list[T]
    requested_count: int
    skip: int
    raw: dict[str, Any] = Field(default_factory=dict, repr=False, exclude=True)

    @property
    def exhausted(self) -> bool:
        return len(self.items) < self.requested_count
