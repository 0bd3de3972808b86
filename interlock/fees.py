"""The rail's published fee for instant settlements, used to project a call's cost against the fee
budget before it is made (G3). Razorpay and the sandbox charge 0.3% plus 18% tax on that fee; the
projection rounds up at both steps, like the sandbox, so it never under-counts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FeeRate:
    fee_per_mille: int = 3  # 0.3%
    tax_percent: int = 18

    def project(self, amount_minor: int) -> int:
        """Total charge including tax (what Razorpay reports as `fees`), in minor units."""
        fee = -(-amount_minor * self.fee_per_mille // 1000)
        tax = -(-fee * self.tax_percent // 100)
        return fee + tax


DEFAULT_FEE_RATE = FeeRate()
