"""Settings of a valid mandate that can never act (issue 48 item 4): `mandate check` and `interlock init` say so.

A mandate with these loads and works — nothing is refused for them — but a person who wrote them meant something
the gates will never do: a hold threshold no call can reach, a per-call maximum a daily window never lets through,
a fixed narration for a payee that can never be paid, an idempotency window the settlement grace reaches across.
"""

from __future__ import annotations

from interlock.clock import now_ms as wall_ms
from interlock.config import DEFAULT_SETTLEMENT_GRACE_MS
from interlock.mandate_model import Mandate
from interlock.tools import MONEY_TOOLS, PAYOUT_TOOL

SOON_DAYS = 7
DAY_MS = 86_400_000


def inert_settings(mandate: Mandate, *, grace_ms: int = DEFAULT_SETTLEMENT_GRACE_MS,
                   now_ms: int | None = None) -> list[str]:  # fmt: skip
    """Each setting of *mandate* that can never act, in words a person can act on."""
    now = wall_ms() if now_ms is None else now_ms
    said: list[str] = []
    hold = mandate.approval.hold_above_minor
    for tool, grant in mandate.scope.grants.items():
        if tool not in MONEY_TOOLS or grant.value is None:
            continue
        value = grant.value
        if hold is not None and hold >= value.max_amount_minor:
            said.append(f"approval.hold_above_minor ({hold}) is at or above {tool}'s max_amount_minor "
                        f"({value.max_amount_minor}): no {tool} call can ever be held for its amount")  # fmt: skip
        for index, window in enumerate(mandate.limits.windows):
            if window.tool not in (None, tool) or window.max_amount_minor is None:
                continue
            if window.currency not in value.currencies:
                continue
            where = f"limits.windows[{index}].max_amount_minor ({window.max_amount_minor})"
            if window.max_amount_minor < value.min_amount_minor:
                said.append(f"{where} is below {tool}'s min_amount_minor ({value.min_amount_minor}): no {tool} call "
                            "can ever pass")  # fmt: skip
            elif window.max_amount_minor < value.max_amount_minor:
                said.append(f"{where} is below {tool}'s max_amount_minor ({value.max_amount_minor}): no single "
                            f"{tool} call above {window.max_amount_minor} can ever pass")  # fmt: skip
    for tool, rule in mandate.idempotency.items():
        if rule.window_ms is not None and rule.window_ms <= grace_ms:
            said.append(f"idempotency.{tool}.window_ms ({rule.window_ms}) is not longer than the settlement window "
                        f"grace ({grace_ms} ms, INTERLOCK_SETTLEMENT_WINDOW_GRACE_MS, ADR 0009): a repeat within the "
                        "grace after a boundary reaches back across a whole window")  # fmt: skip
    payout = mandate.grant(PAYOUT_TOOL)
    if payout is not None and payout.payees is not None and payout.free_text is not None:
        payees = payout.payees
        for payee in payout.free_text.fixed:
            listed = payee in payees.fund_account_ids or payee in payees.contact_ids
            if not listed and payees.unlisted == "block":
                said.append(f"free_text.fixed names {payee}, which is on neither payee list (and unlisted payees are "
                            "refused): its narration can never be sent")  # fmt: skip
    if mandate.expires_at <= now:
        said.append(f"expires_at ({mandate.expires_at}) has passed: G1 refuses every call under this mandate")
    elif mandate.expires_at - now < SOON_DAYS * DAY_MS:
        days = (mandate.expires_at - now) / DAY_MS
        said.append(f"expires_at ({mandate.expires_at}) is {days:.1f} days away: after it G1 refuses every call")
    return said
