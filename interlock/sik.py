"""The semantic idempotency key (SIK) and the outbound stamps derived from it (SPEC §4).

The SIK names the *operation*, not the call: it is derived from what the money movement means
(merchant, tool, the rail entity Interlock itself resolved, amount, currency, window, distinct
reason) so an agent that retries with fresh ids, reordered keys or extra whitespace still lands on
the same key, and the ledger's primary key turns the retry into a replay.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from interlock.canonical import canonical_json
from interlock.money import parse_amount, parse_currency
from interlock.notes import AGENT_STAMP_KEY, MERCHANT_STAMP_KEY, NOTES_STAMP_KEY, RAIL_MAX_NOTES

SIK_VERSION = 1
SIK_LENGTH = 32
RECEIPT_PREFIX = "ilk_"
SETTLEMENT_SUBJECT = "balance"


def compute_sik(
    *,
    merchant_id: str,
    tool: str,
    subject: str,
    amount_minor: int,
    currency: str,
    extra: Any = None,
    window: int | None = None,
    distinct: str | None = None,
) -> str:
    """First 32 chars of unpadded RFC 4648 base32 of sha256(canonical JSON of the semantic fields)."""
    parse_amount(amount_minor, field="amount_minor")
    parse_currency(currency)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"window must be a non-negative integer bucket or None, got {window!r}")
    material = {
        "v": SIK_VERSION,
        "merchant_id": merchant_id,
        "tool": tool,
        "subject": subject,
        "amount_minor": amount_minor,
        "currency": currency,
        "extra": extra,
        "window": window,
        "distinct": distinct,
    }
    digest = hashlib.sha256(canonical_json(material)).digest()
    return base64.b32encode(digest).decode("ascii").rstrip("=")[:SIK_LENGTH]


def window_bucket(now_ms: int, window_ms: int | None) -> int | None:
    """floor(now_ms / window_ms), or None when the tool has no window (refunds)."""
    if window_ms is None:
        return None
    if window_ms <= 0:
        raise ValueError(f"window_ms must be positive, got {window_ms}")
    return now_ms // window_ms


def window_grace_ms(window_ms: int, grace_ms: int) -> int:
    """The grace of ADR 0009 after a boundary of *window_ms* windows: the configured grace, capped at half the
    window, so every window keeps a part where an identical call is a new operation."""
    return max(0, min(grace_ms, window_ms // 2))


def in_window_grace(at_ms: int, window_ms: int, grace_ms: int) -> bool:
    """Whether a call made at *at_ms* falls within the grace after its window's boundary (never in window 0)."""
    window = at_ms // window_ms
    return window > 0 and at_ms - window * window_ms < window_grace_ms(window_ms, grace_ms)


def receipt_for(sik: str) -> str:
    return RECEIPT_PREFIX + sik


def idempotency_key_for(sik: str) -> str:
    # Same value as the receipt: stable across attempts, so a retry sends the same key and body (§14).
    return RECEIPT_PREFIX + sik


def stamp_notes(sik: str, notes: dict[str, str] | None = None, *,
                owner: tuple[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """The agent's notes plus our stamp, and the (merchant, agent) whose call it is when *owner* is given: every
    reserved key (interlock.notes) when the agent's notes are within its allowance. Ours always win: the stamp is the
    only identity we match on."""
    stamped = dict(notes or {})
    stamped[NOTES_STAMP_KEY] = sik
    # No room only for an intent admitted before the agent's allowance made room for the owner (up to 14 notes of
    # its own): it goes without the owner, as it did then, rather than over the rail's limit.
    if owner is not None and len(stamped) + 2 <= RAIL_MAX_NOTES:
        stamped[MERCHANT_STAMP_KEY], stamped[AGENT_STAMP_KEY] = owner
    return stamped


def stamped_owner(entity: dict[str, Any]) -> tuple[str, str] | None:
    """The (merchant, agent) a rail entity's notes name as the call's, or None (sent before owners were stamped)."""
    notes = entity.get("notes")
    if not isinstance(notes, dict):
        return None
    merchant, agent = notes.get(MERCHANT_STAMP_KEY), notes.get(AGENT_STAMP_KEY)
    if isinstance(merchant, str) and merchant and isinstance(agent, str) and agent:
        return merchant, agent
    return None


# Where a rail entity carries "ilk_" + SIK: a refund's receipt, a RazorpayX payout's reference_id (SPEC §18).
STAMP_FIELDS = ("receipt", "reference_id")


def stamped_siks(entity: dict[str, Any]) -> tuple[str, ...]:
    """Every SIK a rail entity's stamp names (notes.interlock_sik, then receipt or reference_id), each once."""
    siks: list[str] = []
    notes = entity.get("notes")
    if isinstance(notes, dict) and isinstance(notes.get(NOTES_STAMP_KEY), str) and notes[NOTES_STAMP_KEY]:
        siks.append(notes[NOTES_STAMP_KEY])
    for name in STAMP_FIELDS:
        value = entity.get(name)
        if isinstance(value, str) and value.startswith(RECEIPT_PREFIX) and len(value) > len(RECEIPT_PREFIX):
            sik = value[len(RECEIPT_PREFIX):]
            if sik not in siks:
                siks.append(sik)
    return tuple(siks)


def carries_stamp(entity: dict[str, Any], sik: str) -> bool:
    """True when a rail entity carries this SIK's stamp (notes.interlock_sik, a receipt or a payout's
    reference_id). Never by amount."""
    notes = entity.get("notes")
    if isinstance(notes, dict) and notes.get(NOTES_STAMP_KEY) == sik:
        return True
    return any(entity.get(name) == receipt_for(sik) for name in STAMP_FIELDS)
