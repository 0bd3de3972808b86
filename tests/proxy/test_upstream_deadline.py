"""Proxy mode: one total deadline per upstream call, opening the session included, and the send window
checked at the hand-over to the SDK's transport and, over HTTP, at the POST's first byte."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import anyio.to_thread
import httpx2
import pytest

from interlock.sik import receipt_for, stamp_notes
from rails import mcp_session
from rails.base import RailError, RailErrorKind
from rails.deadline import SendWindowClosed, armed_window, async_http_transport, send_window
from rails.mcp_session import UpstreamSession, UpstreamTarget
from rails.mcp_upstream import McpUpstreamRail
from sandbox.testing import SandboxProcess, wait_for
from tests.rails.stub_rail import StubRail

DEADLINE_S = 0.8
# Where the deadline is the subject but the connection must be made first (a silent upstream is reached, then says
# nothing): long enough for a loaded machine to open the TCP connection inside it.
OPENING_DEADLINE_S = 2.5
# Where the deadline is not the subject (the send window is): the session may take its time to open.
ROOMY_S = 15.0


def upstream(target: UpstreamTarget, timeout_s: float = DEADLINE_S) -> McpUpstreamRail:
    return McpUpstreamRail(UpstreamSession(target, timeout_s=timeout_s))


def failure(call: object) -> tuple[RailError, float]:
    started = time.monotonic()
    with pytest.raises(RailError) as caught:
        call()  # type: ignore[operator]
    return caught.value, time.monotonic() - started


def refund(rail: McpUpstreamRail, payment_id: str, sik: str) -> object:
    return rail.create_refund(payment_id, 1000, notes=stamp_notes(sik), receipt=receipt_for(sik), idempotency_key=None)


@pytest.fixture
def stdio_front(rail_sandbox: SandboxProcess) -> Iterator[McpUpstreamRail]:
    rail = upstream(UpstreamTarget(command=f"{sys.executable} -m sandbox --mcp --stdio --rail-url {rail_sandbox.url}"),
                    timeout_s=10)  # fmt: skip
    yield rail
    rail.close()


def test_an_http_upstream_that_never_opens_a_session_is_not_sent_within_the_deadline() -> None:
    with StubRail("silent") as stub:
        rail = upstream(UpstreamTarget(url=stub.url + "/mcp"), timeout_s=OPENING_DEADLINE_S)
        try:
            first, first_s = failure(lambda: rail.fetch_payment("pay_UDEAD0000001"))
            again, again_s = failure(lambda: rail.create_refund("pay_UDEAD0000001", 100, notes=None, receipt=None,
                                                                idempotency_key=None))  # fmt: skip
            # The second call waits on the same opening instead of starting another one.
            assert stub.connections == 1 and b'"initialize"' in stub.bytes_received()
        finally:
            rail.close()
    assert first.kind is RailErrorKind.NOT_SENT and again.kind is RailErrorKind.NOT_SENT
    assert first_s < 3 * OPENING_DEADLINE_S and again_s < 3 * OPENING_DEADLINE_S


def test_a_stdio_upstream_that_never_answers_initialize_is_not_sent_within_the_deadline() -> None:
    rail = upstream(UpstreamTarget(command=f"{sys.executable} -c 'import sys; sys.stdin.read()'"))
    try:
        error, elapsed = failure(lambda: rail.fetch_payment("pay_UDEAD0000002"))
    finally:
        rail.close()
    assert error.kind is RailErrorKind.NOT_SENT and elapsed < 3 * DEADLINE_S


def test_a_deadline_after_tools_call_was_handed_over_is_ambiguous(front: str, rail_sandbox: SandboxProcess) -> None:
    rail_sandbox.add_payment("pay_USLOW0000001", 100000)
    sik = "W" * 32
    rail = upstream(UpstreamTarget(url=front), timeout_s=OPENING_DEADLINE_S)
    try:
        with rail_sandbox.slow_held():  # the rail answers only after the deadline, however late it is reached
            error, elapsed = failure(lambda: refund(rail, "pay_USLOW0000001", sik))
            wait_for(lambda: rail_sandbox.health()["slow_waiting"] == 1, timeout=60)
    finally:
        rail.close()
    assert error.kind is RailErrorKind.AMBIGUOUS and elapsed < 2 * OPENING_DEADLINE_S
    wait_for(lambda: rail_sandbox.count_stamped(sik) == 1, timeout=60)


def test_a_closed_send_window_never_reaches_the_upstream(front: str, rail_sandbox: SandboxProcess) -> None:
    rail_sandbox.add_payment("pay_UWIN00000001", 100000)
    sik = "X" * 32
    rail = upstream(UpstreamTarget(url=front), timeout_s=ROOMY_S)
    try:
        with send_window(time.monotonic() - 0.001):
            error, _ = failure(lambda: refund(rail, "pay_UWIN00000001", sik))
        assert error.kind is RailErrorKind.NOT_SENT
        with send_window(time.monotonic() + 60):
            assert refund(rail, "pay_UWIN00000001", "Y" * 32).carries_stamp("Y" * 32)  # type: ignore[attr-defined]
    finally:
        rail.close()
    assert rail_sandbox.count_stamped(sik) == 0


def test_a_lost_lease_or_a_wall_clock_past_the_window_never_reaches_the_upstream(
    front: str, rail_sandbox: SandboxProcess
) -> None:
    # The worker's other two limits travel into the session's event loop with the monotonic one.
    rail_sandbox.add_payment("pay_UWIN00000003", 100000)
    lost = threading.Event()
    lost.set()
    rail = upstream(UpstreamTarget(url=front), timeout_s=ROOMY_S)
    try:
        with send_window(time.monotonic() + 60, lost=lost):
            error, _ = failure(lambda: refund(rail, "pay_UWIN00000003", "L" * 32))
        assert error.kind is RailErrorKind.NOT_SENT
        with send_window(time.monotonic() + 60, wall_until_ms=1000, wall_clock=lambda: 2000):
            error, _ = failure(lambda: refund(rail, "pay_UWIN00000003", "M" * 32))
        assert error.kind is RailErrorKind.NOT_SENT
    finally:
        rail.close()
    assert rail_sandbox.count_stamped("L" * 32) == rail_sandbox.count_stamped("M" * 32) == 0


def test_a_window_that_closes_while_the_session_opens_is_refused_at_the_hand_over(
    stdio_front: McpUpstreamRail, rail_sandbox: SandboxProcess
) -> None:
    rail_sandbox.add_payment("pay_UWIN00000002", 100000)
    sik = "Z" * 32
    # Open when the call starts; starting the stdio upstream takes far longer than this window.
    with send_window(time.monotonic() + 0.15):
        error, _ = failure(lambda: refund(stdio_front, "pay_UWIN00000002", sik))
    assert error.kind is RailErrorKind.NOT_SENT
    # Nothing was handed over, so the session it waited for is kept and the same call can go through.
    with send_window(time.monotonic() + 60):
        assert refund(stdio_front, "pay_UWIN00000002", sik).carries_stamp(sik)  # type: ignore[attr-defined]
    assert rail_sandbox.count_stamped(sik) == 1


class _ClosesAtTheWire(mcp_session._Call):
    """A call whose window is open at the hand-over and closed by the time the POST writes its first byte,
    as if the process were paused in between."""

    def hand_over(self) -> bool:
        first = super().hand_over()
        if self.window is not None:
            self.window.send_by = time.monotonic() - 0.001
        return first


def test_a_window_closed_before_the_posts_first_byte_is_not_sent(
    front: str, rail_sandbox: SandboxProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    rail_sandbox.add_payment("pay_UWIRE0000001", 100000)
    sik = "V" * 32
    rail = upstream(UpstreamTarget(url=front), timeout_s=5)
    try:
        assert rail.fetch_payment("pay_UWIRE0000001").amount == 100000  # the session is open
        monkeypatch.setattr(mcp_session, "_Call", _ClosesAtTheWire)
        with send_window(time.monotonic() + 60):
            error, _ = failure(lambda: refund(rail, "pay_UWIRE0000001", sik))
        assert error.kind is RailErrorKind.NOT_SENT
        monkeypatch.undo()
        assert rail.fetch_payment("pay_UWIRE0000001").amount == 100000  # a fresh session
    finally:
        rail.close()
    assert rail_sandbox.count_stamped(sik) == 0


@pytest.mark.anyio
async def test_the_httpx2_transport_refuses_a_first_byte_after_the_window() -> None:
    with StubRail("answer") as stub:
        async with httpx2.AsyncClient(transport=async_http_transport(), base_url=stub.url) as http:
            with armed_window(time.monotonic() - 0.001) as late, pytest.raises(SendWindowClosed):
                await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
            await anyio.to_thread.run_sync(stub.wait_closed)
            assert late.refused and not late.sent
            assert stub.connections == 1 and stub.bytes_received() == b""
            with armed_window(time.monotonic() + 60) as open_:
                assert (await http.post("/mcp", json={"jsonrpc": "2.0"})).json() == {"ok": True}
            assert open_.sent and not open_.refused
