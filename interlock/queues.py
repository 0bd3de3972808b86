"""Every Redis key and queue name, in one place, under one `interlock:` namespace.

Names are built from a shard id (SPEC §15) so that sharding by merchant later changes routing,
not names scattered through the code.
"""

from __future__ import annotations

import hashlib

NAMESPACE = "interlock"
DEFAULT_SHARD = "0"


def gates_queue() -> str:
    # Gate workers are stateless and shared by every shard.
    return "gates"


def rail_queue(shard: str = DEFAULT_SHARD) -> str:
    return "rail" if shard == DEFAULT_SHARD else f"rail:{shard}"


def reconcile_queue(shard: str = DEFAULT_SHARD) -> str:
    return "reconcile" if shard == DEFAULT_SHARD else f"reconcile:{shard}"


def outcome_key(request_id: str) -> str:
    """A Redis list the rail worker pushes the first recorded Outcome of a request onto."""
    return f"{NAMESPACE}:outcome:{request_id}"


def shard_for_merchant(merchant_id: str, shards: int = 1) -> str:
    """Stable routing of a merchant to a shard (sha256, not Python's salted hash())."""
    if shards <= 1:
        return DEFAULT_SHARD
    digest = hashlib.sha256(merchant_id.encode("utf-8")).digest()
    return str(int.from_bytes(digest[:8], "big") % shards)


OUTCOME_TTL_S = 3600
