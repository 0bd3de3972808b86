"""RFC 8785 canonical JSON and the hashes built on it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

_SAFE_INT = 2**53 - 1  # JCS writes numbers as IEEE doubles: beyond this an integer is refused


def canonical_json(value: Any) -> bytes:
    """Serialise *value* as RFC 8785 (JCS) canonical JSON bytes.

    Floats are refused outright: no money value, key or hash input in Interlock is a float, and
    JCS number formatting of floats is exactly the kind of ambiguity a hash must not depend on.
    """
    if _plain(value):  # holds no float, by construction
        try:
            # The same bytes as rfc8785.dumps for plain values (tests/interlock/test_canonical_fast.py checks it),
            # at a fraction of the cost: every audit record and every intent's hash goes through here.
            return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 refuses it with its own error
    _refuse_floats(value, "$")
    return rfc8785.dumps(value)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_hash(value: Any) -> str:
    """sha256 (lower-case hex) of the canonical JSON of *value*."""
    return sha256_hex(canonical_json(value))


def _plain(value: Any) -> bool:
    """True when json.dumps writes *value* exactly as RFC 8785 does: exact str / int / bool / None / list / dict
    types (no subclasses such as enums), integers inside the JCS domain, and object keys in ASCII — for those,
    code-point order (sort_keys) is UTF-16 order (JCS) and both escape strings the same way."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_SAFE_INT <= value <= _SAFE_INT
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                return False
            if type(item) is not str and not _plain(item):  # most values are strings: no call for them
                return False
        return True
    if kind is list or kind is tuple:
        for item in value:
            if type(item) is not str and not _plain(item):
                return False
        return True
    return False


def _refuse_floats(value: Any, path: str) -> None:
    if isinstance(value, float):
        raise TypeError(f"float at {path} cannot be canonicalised; use integer minor units")
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_floats(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_floats(item, f"{path}[{index}]")
