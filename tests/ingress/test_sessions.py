"""What the ingress logs when it refuses an MCP session (issue 46 item 6): the agent's own count and cap when the
agent's cap refused it, and never the SDK's line naming its global cap, which is false then.

In process, on ingress.sessions.AgentSessionManager itself: a session with a request in flight is stood in for by a
transport with no idle countdown (`idle_scope` None), which is what the manager reads to tell it may not be closed.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server

from ingress.sessions import AgentSessionManager

pytestmark = pytest.mark.anyio

INITIALIZE = (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", '
              b'"capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}')  # fmt: skip
SDK_LINE = "Refusing to open a new session"


def agent(name: str) -> AuthenticatedUser:
    return AuthenticatedUser(AccessToken(token=name, client_id=name, scopes=[]))


def hold_busy_sessions(manager: AgentSessionManager, owner: str, count: int) -> None:
    for n in range(count):
        session_id = f"{owner}-{n}"
        manager._server_instances[session_id] = SimpleNamespace(idle_scope=None)  # type: ignore[assignment]
        manager._session_owners[session_id] = authorization_context(agent(owner))


async def open_session(manager: AgentSessionManager, name: str) -> tuple[int, bytes]:
    """One `initialize` without a session id, as ingress.http.BearerAuth hands it on: (status, body)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": INITIALIZE, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "query_string": b"", "user": agent(name),
             "headers": [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]}
    await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def refused_with(per_agent: int, max_sessions: int, busy: dict[str, int], caplog: pytest.LogCaptureFixture,
                       name: str = "agent_a") -> list[str]:  # fmt: skip
    """*name*'s initialize against sessions held busy per *busy*, refused 503; the warnings it logged."""
    manager = AgentSessionManager(Server("t"), per_agent=per_agent, max_sessions=max_sessions,
                                  session_idle_timeout=60)  # fmt: skip
    async with manager.run():
        for owner, count in busy.items():
            hold_busy_sessions(manager, owner, count)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            status, body = await open_session(manager, name)
        manager._server_instances.clear()  # the stand-ins have nothing for run()'s shutdown to end
        manager._session_owners.clear()
    assert (status, b"Too many open sessions" in body) == (503, True)
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_agent_s_cap_refusal_is_logged_with_its_count_and_cap_and_not_as_the_sdk_s_global_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logged = await refused_with(per_agent=2, max_sessions=1024, busy={"agent_a": 2, "agent_b": 1}, caplog=caplog)
    # Before: also "Refusing to open a new session: 1024 sessions are already open", with three open.
    assert logged == ["refusing a new MCP session for agent agent_a: it holds 2 open sessions, its maximum "
                      "(INTERLOCK_HTTP_AGENT_MAX_SESSIONS=2), each with a request in flight; 3 sessions are open in "
                      "all (at most 1024)"]  # fmt: skip


async def test_a_refusal_by_the_global_cap_keeps_the_sdk_s_line_which_is_true_then(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logged = await refused_with(per_agent=2, max_sessions=4, busy={"agent_b": 2, "agent_c": 2}, caplog=caplog)
    assert logged == [f"{SDK_LINE}: 4 sessions are already open"]


async def test_the_sdk_s_line_is_dropped_only_for_the_request_the_agent_s_cap_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    await refused_with(per_agent=1, max_sessions=1024, busy={"agent_a": 1}, caplog=caplog)
    # The same process, a later request refused by the global cap: its line is still there.
    logged = await refused_with(per_agent=2, max_sessions=2, busy={"agent_b": 2}, caplog=caplog)
    assert logged == [f"{SDK_LINE}: 2 sessions are already open"]
