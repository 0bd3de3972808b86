"""The upstream MCP adapter answers the rail interface with the REST client's types and error kinds,
against the real sandbox behind its real MCP front."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.ports import free_port
from interlock.sik import receipt_for, stamp_notes
from rails.base import RailError, RailErrorKind, make_rail
from rails.mcp_session import UpstreamSession, UpstreamTarget
from rails.mcp_upstream import McpUpstreamRail
from sandbox.testing import SandboxProcess

SIK = "Q" * 32


@pytest.fixture
def upstream(front: str) -> Iterator[McpUpstreamRail]:
    rail = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=front), timeout_s=5))
    yield rail
    rail.close()


def test_make_rail_selects_the_upstream_adapter_and_names_what_is_missing(front: str) -> None:
    rail = make_rail(load_settings(rail="mcp-upstream", upstream_url=front))
    try:
        assert isinstance(rail, McpUpstreamRail)
    finally:
        rail.close()
    with pytest.raises(ConfigError, match="INTERLOCK_UPSTREAM_URL"):
        make_rail(load_settings(rail="mcp-upstream", upstream_url=None, upstream_command=None))


def test_reads_money_and_paging_return_typed_entities(upstream: McpUpstreamRail, rail_sandbox: SandboxProcess) -> None:
    pid = "pay_UPAGE1"
    rail_sandbox.add_payment(pid, 100000, prior_refunds=3)
    assert upstream.fetch_payment(pid).amount == 100000
    refund = upstream.create_refund(pid, 2500, notes=stamp_notes(SIK), receipt=receipt_for(SIK), idempotency_key=None)
    assert refund.carries_stamp(SIK) and refund.amount == 2500
    page = upstream.list_refunds_for_payment(pid, count=2, skip=0)
    assert len(page.items) == 2 and not page.exhausted
    last = upstream.list_refunds_for_payment(pid, count=2, skip=2)
    assert len(last.items) == 2 and not last.exhausted
    assert upstream.list_refunds_for_payment(pid, count=2, skip=4).exhausted
    assert upstream.fetch_refund(refund.id).id == refund.id
    assert upstream.fetch_balance().currency == "INR"


def test_a_razorpay_4xx_is_rejected_a_504_ambiguous_and_no_session_not_sent(
    upstream: McpUpstreamRail, rail_sandbox: SandboxProcess
) -> None:
    with pytest.raises(RailError) as missing:
        upstream.fetch_payment("pay_DOESNOTEXIST1")
    assert missing.value.kind is RailErrorKind.REJECTED and missing.value.not_found
    rail_sandbox.add_payment("pay_UAMBIG1", 100000)
    rail_sandbox.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
    try:
        with pytest.raises(RailError) as gateway:
            upstream.create_refund("pay_UAMBIG1", 100, notes=stamp_notes("R" * 32), receipt=receipt_for("R" * 32),
                                   idempotency_key=None)  # fmt: skip
    finally:
        rail_sandbox.clear_faults()
    assert gateway.value.kind is RailErrorKind.AMBIGUOUS and gateway.value.http_status == 504
    # The same receipt again: Razorpay refuses its reuse, which is how a duplicate send is stopped upstream.
    with pytest.raises(RailError) as reused:
        upstream.create_refund("pay_UAMBIG1", 100, notes=stamp_notes("R" * 32), receipt=receipt_for("R" * 32),
                               idempotency_key=None)  # fmt: skip
    assert reused.value.kind is RailErrorKind.REJECTED and "receipt" in (reused.value.description or "")

    nowhere = McpUpstreamRail(UpstreamSession(UpstreamTarget(url=f"http://127.0.0.1:{free_port()}/mcp"),
                                              timeout_s=2, connect_timeout_s=3))  # fmt: skip
    with pytest.raises(RailError) as unsent:
        nowhere.fetch_payment("pay_UAMBIG1")
    nowhere.close()
    assert unsent.value.kind is RailErrorKind.NOT_SENT


def test_the_stdio_upstream_is_one_held_child_process(rail_sandbox: SandboxProcess) -> None:
    rail_sandbox.add_payment("pay_USTDIO1", 5000)
    command = f"{sys.executable} -m sandbox --mcp --stdio --rail-url {rail_sandbox.url}"
    rail = make_rail(load_settings(rail="mcp-upstream", upstream_command=command))
    try:
        assert [rail.fetch_payment("pay_USTDIO1").amount for _ in range(3)] == [5000] * 3
    finally:
        rail.close()

