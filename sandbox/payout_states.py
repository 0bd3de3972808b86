"""A RazorpayX payout's statuses as one table (SPEC §18), what each change costs, and the webhook it sends.

    queued ──► processing ──► processed ──► reversed
      │            ├────────► failed
      └─► cancelled└────────► reversed

A payout that the business account can pay for starts `processing` at once; one it cannot, created with
`queue_if_low_balance: true`, waits `queued` (nothing debited, `fees` and `tax` 0) and starts when a top-up
makes room — oldest first, a payout that still does not fit letting the next one go (Razorpay's FIFO). Starting
debits the amount plus `fees`, which is the fee *including* its tax (`tax` is shown apart, as Razorpay shows it:
a ₹5 fee is `fees` 590, `tax` 90). A payout that ends `failed` or `reversed` gives all of it back.
`pending`, `rejected` (approval workflows) and `scheduled` are Razorpay statuses the sandbox never enters:
RazorpayX test mode has no approval workflow, and scheduling is a dashboard feature.

No other code sets a payout's `status`: it goes through `moved`, which refuses what the table does not allow.
"""

from __future__ import annotations

from typing import Any

from sandbox.journal import stable_utr

FEE = 500  # paise per payout, every mode: the fee in Razorpay's own payout examples (₹5 + 18% GST = 590)
GST_PERCENT = 18

TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"processing", "cancelled"}),
    "processing": frozenset({"processed", "failed", "reversed"}),
    "processed": frozenset({"reversed"}),
}
# The money comes back when a payout that had been paid for does not reach the beneficiary.
REFUNDED = frozenset({"failed", "reversed"})

EVENTS = {
    "queued": "payout.queued",
    "processing": "payout.initiated",
    "processed": "payout.processed",
    "failed": "payout.failed",
    "reversed": "payout.reversed",
    # Razorpay lists no event for a cancellation; the entity changed, which is what payout.updated says.
    "cancelled": "payout.updated",
}

# status_details as Razorpay fills them; the queued and processed texts are Razorpay's own, the rest the sandbox's.
STATUS_DETAILS: dict[str, dict[str, str]] = {
    "queued": {
        "description": "Payout is queued as there is insufficient balance in your business account to process the "
        "payout",
        "source": "business",
        "reason": "low_balance",
    },
    "processing": {
        "description": "Payout is being processed by our partner bank",
        "source": "internal",
        "reason": "payout_bank_processing",
    },
    "processed": {
        "description": "Payout is processed and the money has been credited into the beneficiaries account",
        "source": "beneficiary_bank",
        "reason": "payout_processed",
    },
    "failed": {
        "description": "Payout failed at the beneficiary bank. The amount and fees have been credited back to your "
        "business account",
        "source": "beneficiary_bank",
        "reason": "beneficiary_bank_failure",
    },
    "reversed": {
        "description": "Payout was reversed by the beneficiary bank. The amount and fees have been credited back to "
        "your business account",
        "source": "beneficiary_bank",
        "reason": "beneficiary_bank_reversal",
    },
    "cancelled": {
        "description": "Payout was cancelled before it was processed",
        "source": "business",
        "reason": "payout_cancelled",
    },
}


class IllegalTransition(ValueError):
    """Raised when a payout is moved to a status its current one cannot reach; names both."""

    def __init__(self, payout_id: str, was: str, now: str) -> None:
        super().__init__(f"payout {payout_id} is {was}; it cannot become {now}")
        self.payout_id = payout_id
        self.was = was
        self.now = now


def payout_fees(amount: int) -> tuple[int, int]:
    """(fees including tax, tax) for one payout, the tax rounded up (never less than the published rate)."""
    del amount  # a flat fee: the amount does not change it
    tax = -(-FEE * GST_PERCENT // 100)
    return FEE + tax, tax


def cost(payout: dict[str, Any]) -> int:
    """What starting *payout* debits from the business account: the amount and the fees (tax included)."""
    return int(payout["amount"]) + payout_fees(int(payout["amount"]))[0]


def moved(payout: dict[str, Any], status: str) -> dict[str, Any]:
    """*payout* in *status*, with what Razorpay shows there; refuses a change the table does not allow."""
    was = payout["status"]
    if status not in TRANSITIONS.get(was, frozenset()):
        raise IllegalTransition(payout["id"], was, status)
    entity = {**payout, "status": status, "status_details": dict(STATUS_DETAILS[status])}
    if status == "processing":  # fees and tax are shown from processing on
        entity["fees"], entity["tax"] = payout_fees(int(payout["amount"]))
    elif status == "processed":
        entity["utr"] = stable_utr(payout["id"])
    return entity


def refund_on(was: str, status: str) -> bool:
    """True when moving from *was* to *status* gives the business account back what starting the payout took."""
    return status in REFUNDED and was in ("processing", "processed")


def event(status: str) -> str:
    """The webhook a payout now in *status* sends (at creation too: payout.initiated or payout.queued)."""
    return EVENTS[status]
