"""The rail's published fee for instant settlements and payouts, used to project a call's cost against the fee
budget before it is made (G3). Razorpay and the sandbox charge 0.3% plus 18% tax on that fee; the
projection rounds up at both steps, like the sandbox, so it never under-counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from interlock.tools import PAYOUT_TOOL


@dataclass(frozen=True, slots=True)
class FeeRate:
    fee_per_mille: int = 3  # 0.3%
    tax_percent: int = 18
    # A RazorpayX payout's fee before tax: flat, whatever the amount (₹5, the fee of Razorpay's payout examples and
    # of the sandbox; SPEC §18). Its tax is tax_percent, as for settlements.
    payout_fee_minor: int = 500

    def project(self, amount_minor: int) -> int:
        """Total charge including tax (what Razorpay reports as `fees`), in minor units."""
        fee = -(-amount_minor * self.fee_per_mille // 1000)
        tax = -(-fee * self.tax_percent // 100)
        return fee + tax

    def project_payout(self) -> int:
        """A payout's fee including tax (what RazorpayX reports as `fees` once it is processing)."""
        return self.payout_fee_minor + -(-self.payout_fee_minor * self.tax_percent // 100)

    def project_for(self, tool: str, amount_minor: int) -> int:
        """The projected fee of one call of *tool*: a payout's flat fee, a settlement's share of its amount."""
        return self.project_payout() if tool == PAYOUT_TOOL else self.project(amount_minor)


DEFAULT_FEE_RATE = FeeRate()
