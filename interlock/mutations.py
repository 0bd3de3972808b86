"""Deliberate, environment-guarded breakage, so the chaos matrix can prove it is able to fail.

INTERLOCK_MUTATION names one mutation; production never sets it. Each mutation site is one line
that asks `active(name)`; the verdict engine must report a violation when one is active.
"""

from __future__ import annotations

import os

MUTATION_ENV = "INTERLOCK_MUTATION"

KNOWN = frozenset(
    {
        "record_replayed_id",  # rail worker: trust any 2xx body as ours (skips the stamp check)
        "blind_retry",  # rail worker: on an ambiguous answer, call again at once with a fresh key
    }
)


def active(name: str) -> bool:
    if name not in KNOWN:
        raise ValueError(f"unknown mutation {name!r}")
    return os.environ.get(MUTATION_ENV) == name
