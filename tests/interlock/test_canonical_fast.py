"""canonical_json's fast path writes exactly what rfc8785 writes, for every plain value it takes; anything else
goes to rfc8785 itself. A hash that changed by one byte would break every audit chain already written."""

from __future__ import annotations

import enum
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.canonical import _plain, canonical_json

SAFE = 2**53 - 1
controls = st.text(alphabet=st.characters(max_codepoint=0x20))
scalars = st.none() | st.booleans() | st.integers(-SAFE, SAFE) | st.text() | controls
keys = st.text() | st.text(alphabet=st.characters(max_codepoint=0x7F))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
                      max_leaves=30)  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(values)
def test_the_fast_path_writes_the_same_bytes_as_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_what_the_fast_path_does_not_take() -> None:
    class Kind(enum.StrEnum):
        REFUND = "refund"

    assert _plain({"a": [1, "x", None, True]})
    assert not _plain({"é": 1})  # key order by UTF-16 is not code-point order for every non-ASCII key
    assert not _plain({"a": 2**53})  # outside the JCS integer domain: rfc8785 refuses it
    assert not _plain({"a": Kind.REFUND})
    assert canonical_json({"kind": Kind.REFUND, "\U0001f600": 1, "\uff61": 2}) == rfc8785.dumps(
        {"kind": Kind.REFUND, "\U0001f600": 1, "\uff61": 2})
    with pytest.raises(rfc8785.IntegerDomainError):
        canonical_json({"a": 2**53})
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_json({"a": "\ud800"})


@pytest.mark.parametrize("value", [1.5, {"amount": 100.0}, {"lines": [{"amount": 1, "fee": 0.5}]}, (1, 2.0)])
def test_a_float_anywhere_is_refused_with_its_path(value: Any) -> None:
    with pytest.raises(TypeError, match=r"float at \$.* cannot be canonicalised"):
        canonical_json(value)
    with pytest.raises(TypeError, match=r"\$\.lines\[0\]\.fee"):
        canonical_json({"lines": [{"amount": 1, "fee": 0.5}]})
