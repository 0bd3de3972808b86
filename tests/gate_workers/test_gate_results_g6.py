"""G6's whole result for each provenance case: a pin that matches or drifts, an unpinned own tool (allowed, and
recorded as unpinned) against an unpinned upstream tool (blocked), a tool with no current definition, and the
trust tier a reviewer recorded on the pin — every detail key an operator reads, compared with ==."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

from gate_workers.gates import g6_provenance
from interlock.messages import Verdict
from interlock.tools import current_pins
from interlock.verdicts import GateResult
from tests.gate_workers.factories import context, refund_action
from tests.mandates import make_mandate

A, B = Verdict.ALLOW, Verdict.BLOCK
PINS = current_pins()
UPSTREAM = "razorpay_create_refund"
UPSTREAM_SHA = "a" * 64
DRIFTED_SHA = "0" * 64
DRIFT = GateResult(B, "G6_MANIFEST_DRIFT", {"tool": "create_refund", "pinned_sha256": PINS["create_refund"],
                                            "current_sha256": DRIFTED_SHA})  # fmt: skip


def test_a_pinned_own_tool_whose_definition_matches_is_allowed_with_its_hash(ledger: sqlite3.Connection) -> None:
    result = g6_provenance.check(refund_action(), context(ledger))
    assert result == GateResult(A, "G6_PINNED", {"tool": "create_refund", "sha256": PINS["create_refund"]})


def test_a_pinned_tool_records_the_trust_tier_its_reviewer_gave_it(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"provenance.pinned_manifests.create_refund.trust_tier": "vendor-reviewed"})
    result = g6_provenance.check(refund_action(), context(ledger, mandate))
    assert result == GateResult(A, "G6_PINNED", {"tool": "create_refund", "sha256": PINS["create_refund"],
                                                 "trust_tier": "vendor-reviewed"})  # fmt: skip


def test_a_pinned_tool_whose_definition_drifted_is_blocked_naming_both_hashes(ledger: sqlite3.Connection) -> None:
    ctx = context(ledger, tool_hashes={**PINS, "create_refund": DRIFTED_SHA})
    result = g6_provenance.check(refund_action(), ctx)
    assert result == DRIFT


def test_a_trust_tier_does_not_excuse_drift(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"provenance.pinned_manifests.create_refund.trust_tier": "vendor-reviewed"})
    ctx = context(ledger, mandate, tool_hashes={**PINS, "create_refund": DRIFTED_SHA})
    result = g6_provenance.check(refund_action(), ctx)
    assert result == DRIFT


def test_a_tool_with_no_current_definition_is_blocked_as_unknown(ledger: sqlite3.Connection) -> None:
    hashes = {tool: sha for tool, sha in PINS.items() if tool != "create_refund"}
    result = g6_provenance.check(refund_action(), context(ledger, tool_hashes=hashes))
    assert result == GateResult(B, "G6_UNKNOWN_TOOL", {"tool": "create_refund"})


def test_an_unknown_upstream_tool_is_blocked_as_unknown_even_when_pinned(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({f"provenance.pinned_manifests.{UPSTREAM}": {"sha256": UPSTREAM_SHA}})
    ctx = context(ledger, mandate, tool_hashes={}, upstream_tools=frozenset())
    assert g6_provenance.check_tool(UPSTREAM, ctx) == GateResult(B, "G6_UNKNOWN_TOOL", {"tool": UPSTREAM})


def test_an_unpinned_own_tool_is_allowed_and_recorded_as_unpinned(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({"provenance.pinned_manifests": {}})
    result = g6_provenance.check(refund_action(), context(ledger, mandate))
    assert result == GateResult(A, "G6_UNPINNED", {"tool": "create_refund", "unpinned": True,
                                                   "current_sha256": PINS["create_refund"]})  # fmt: skip


def test_an_unpinned_upstream_tool_is_blocked(ledger: sqlite3.Connection) -> None:
    ctx = context(ledger, tool_hashes={UPSTREAM: UPSTREAM_SHA}, upstream_tools=frozenset({UPSTREAM}))
    result = g6_provenance.check_tool(UPSTREAM, ctx)
    assert result == GateResult(B, "G6_UNPINNED_TOOL", {"tool": UPSTREAM, "current_sha256": UPSTREAM_SHA})


def test_a_pinned_upstream_tool_is_judged_by_its_pin(ledger: sqlite3.Connection) -> None:
    mandate = make_mandate({f"provenance.pinned_manifests.{UPSTREAM}": {"sha256": UPSTREAM_SHA}})
    same = context(ledger, mandate, tool_hashes={UPSTREAM: UPSTREAM_SHA}, upstream_tools=frozenset({UPSTREAM}))
    assert g6_provenance.check_tool(UPSTREAM, same) == GateResult(
        A, "G6_PINNED", {"tool": UPSTREAM, "sha256": UPSTREAM_SHA}
    )
    drifted = replace(same, tool_hashes={UPSTREAM: DRIFTED_SHA})
    assert g6_provenance.check_tool(UPSTREAM, drifted) == GateResult(
        B, "G6_MANIFEST_DRIFT", {"tool": UPSTREAM, "pinned_sha256": UPSTREAM_SHA, "current_sha256": DRIFTED_SHA}
    )


def test_without_a_mandate_nothing_is_pinned_so_own_tools_pass_unpinned_and_upstream_ones_block(
    ledger: sqlite3.Connection,
) -> None:
    own = replace(context(ledger), mandate=None)
    assert g6_provenance.check(refund_action(), own) == GateResult(
        A, "G6_UNPINNED", {"tool": "create_refund", "unpinned": True, "current_sha256": PINS["create_refund"]}
    )
    upstream = replace(own, tool_hashes={UPSTREAM: UPSTREAM_SHA}, upstream_tools=frozenset({UPSTREAM}))
    assert g6_provenance.check_tool(UPSTREAM, upstream) == GateResult(
        B, "G6_UNPINNED_TOOL", {"tool": UPSTREAM, "current_sha256": UPSTREAM_SHA}
    )
