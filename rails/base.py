"""The rail interface every actor uses, and the one place that picks its implementation.

Two implementations answer it with the same typed entities and the same `RailError` kinds:
`rails.razorpay.RazorpayClient` (REST, INTERLOCK_RAIL=razorpay-rest, the default) and
`rails.mcp_upstream.McpUpstreamRail` (an upstream MCP server exposing Razorpay MCP tool names,
INTERLOCK_RAIL=mcp-upstream). Callers never branch on which one they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from interlock.config import Settings
from interlock.errors import ConfigError
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind

__all__ = ["Rail", "RailError", "RailErrorKind", "make_rail", "RAIL_REST", "RAIL_MCP_UPSTREAM"]

RAIL_REST = "razorpay-rest"
RAIL_MCP_UPSTREAM = "mcp-upstream"


class Rail(Protocol):
    """What Interlock asks of a rail. Reads are used by gates, the ingress and the reconciler; only the
    rail worker calls the money methods (SPEC §2). No method retries (I3)."""

    def fetch_payment(self, payment_id: str) -> Payment: ...

    def fetch_refund(self, refund_id: str) -> Refund: ...

    def create_refund(
        self,
        payment_id: str,
        amount: int | None,
        *,
        speed: str | None = None,
        notes: Mapping[str, Any] | None,
        receipt: str | None,
        idempotency_key: str | None,
    ) -> Refund: ...

    def list_refunds_for_payment(self, payment_id: str, *, count: int = ..., skip: int = ...) -> Page[Refund]: ...

    def create_instant_settlement(
        self,
        amount: int | None = None,
        *,
        settle_full_balance: bool = False,
        description: str | None = None,
        notes: Mapping[str, Any] | None,
    ) -> Settlement: ...

    def list_instant_settlements(self, *, count: int = ..., skip: int = ...) -> Page[Settlement]: ...

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement: ...

    def fetch_balance(self) -> Balance: ...

    # RazorpayX payouts (SPEC §18): on the REST rail only; an upstream MCP server refuses them (404-shaped).
    def create_payout(
        self,
        *,
        account_number: str,
        fund_account_id: str,
        amount: int,
        currency: str,
        mode: str,
        purpose: str,
        queue_if_low_balance: bool,
        reference_id: str,
        narration: str | None,
        notes: Mapping[str, Any] | None,
        idempotency_key: str,
    ) -> Payout: ...

    def fetch_payout(self, payout_id: str) -> Payout: ...

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = ..., skip: int = ...) -> Page[Payout]: ...  # fmt: skip

    def cancel_payout(self, payout_id: str) -> Payout: ...

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount: ...

    def fetch_banking_balance(self, account_number: str) -> BankingBalance: ...

    def close(self) -> None: ...


def make_rail(settings: Settings) -> Rail:
    """The rail named by INTERLOCK_RAIL; ConfigError names what is missing for it."""
    if settings.rail == RAIL_MCP_UPSTREAM:
        from rails.mcp_upstream import McpUpstreamRail

        return McpUpstreamRail.from_settings(settings)
    if settings.rail == RAIL_REST:
        from rails.razorpay import RazorpayClient

        return RazorpayClient.from_settings(settings)
    raise ConfigError(f"INTERLOCK_RAIL={settings.rail!r} is not a known rail", variable="INTERLOCK_RAIL")


def check_rail_settings(settings: Settings) -> None:
    """Refuse at start, naming the variable, a process whose rail settings are missing or malformed (what make_rail
    would refuse on first use): the client is built and closed, and nothing is sent."""
    make_rail(settings).close()
