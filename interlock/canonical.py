"""RFC 8785 canonical JSON and the hashes built on it."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """Serialise *value* as RFC 8785 (JCS) canonical JSON bytes.

    Floats are refused outright: no money value, key or hash input in Interlock is a float, and
    JCS number formatting of floats is exactly the kind of ambiguity a hash must not depend on.
    """
    _refuse_floats(value, "$")
    return rfc8785.dumps(value)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """sha256 (lower-case hex) of the canonical JSON of *value*."""
    return sha256_hex(canonical_json(value))


def _refuse_floats(value: Any, path: str) -> None:
    if isinstance(value, float):
        raise TypeError(f"float at {path} cannot be canonicalised; use integer minor units")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_floats(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_floats(item, f"{path}[{index}]")
