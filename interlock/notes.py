"""The keys Interlock writes into the `notes` of every money call it sends, and the room they leave an agent.

Razorpay keeps at most RAIL_MAX_NOTES key-value pairs on an entity, each key and value at most MAX_NOTE_CHARS
characters (SPEC §10). Every money call carries every one of RESERVED_NOTE_KEYS: the SIK stamp, the only identity
rail entities are matched on (SPEC §4), and the merchant and agent whose call it was, which a restore after machine
loss reads to record an entity its ledger lost under the right mandate (ADR 0029). So an agent may send at most
AGENT_MAX_NOTES notes of its own, none under a reserved key: the tools' schemas say so, and interlock.arguments
refuses a call that does not leave the room, before anything is recorded.
"""

from __future__ import annotations

RAIL_MAX_NOTES = 15  # Razorpay's limit
MAX_NOTE_CHARS = 256  # Razorpay's limit, for each key and each value

NOTES_STAMP_KEY = "interlock_sik"
# Whose call made the entity: beside the SIK, never part of it (the stamp is still the identity).
MERCHANT_STAMP_KEY = "interlock_merchant"
AGENT_STAMP_KEY = "interlock_agent"
RESERVED_NOTE_KEYS = (NOTES_STAMP_KEY, MERCHANT_STAMP_KEY, AGENT_STAMP_KEY)

AGENT_MAX_NOTES = RAIL_MAX_NOTES - len(RESERVED_NOTE_KEYS)
