"""MCP sessions over HTTP, capped per agent (ADR 0017).

The SDK's session manager has one cap for the whole process (10,000 by default) and a 30-minute idle
timeout, so one agent opening sessions it never closes refuses every other agent's `initialize` (503)
for half an hour. Here each agent may hold at most `per_agent` sessions: a new one closes that agent's
oldest session with nothing in flight, so an agent whose client restarted and lost its sessions is not
locked out by them, and only an agent that keeps all of its sessions busy is refused (503, as the SDK
answers at its own cap). The global cap stays well above the per-agent one (the settings refuse less than
twice), and a session idles out after `INTERLOCK_HTTP_SESSION_IDLE_MS` with no request in flight: the
SDK counts a request being served or an open GET stream as in flight, which is the same test used here.

The SDK binds each session to the credential that opened it (`_session_owners`); the agent is that
credential's client_id, stamped by ingress.http.BearerAuth.

A refusal is logged once, by us, with the agent's count and cap. The SDK logs its own line for any refusal
("%d sessions are already open", naming its global cap), which is false for an agent's: that line is dropped
for the request an agent's cap refused, and kept when the global cap refused it (then it is true).
"""

from __future__ import annotations

import logging
import math
from contextvars import ContextVar
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.routing import Route

logger = logging.getLogger(__name__)

# Whether the request being served was refused by its agent's cap: set by _admit_session, read by the filter on
# the SDK's logger, which logs its refusal line in the same task right after (each request is a task of its own).
_REFUSED_BY_AGENT_CAP: ContextVar[bool] = ContextVar("interlock_refused_by_agent_cap", default=False)
_SDK_REFUSAL = "Refusing to open a new session"


class _DropSdkLineForAgentCap(logging.Filter):
    """Drops the SDK's refusal line, which names its global cap, for a refusal that was an agent's cap."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_REFUSED_BY_AGENT_CAP.get() and str(record.msg).startswith(_SDK_REFUSAL))


_SDK_LOGGER = logging.getLogger(StreamableHTTPSessionManager.__module__)
_SDK_LINE_FILTER = _DropSdkLineForAgentCap()


class AgentSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with a cap per agent under its global one."""

    def __init__(self, app: Server[Any], *, per_agent: int, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.per_agent = per_agent
        _SDK_LOGGER.addFilter(_SDK_LINE_FILTER)  # once: the same filter is never added twice

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        # Runs under the SDK's session-creation lock, with no await: the count and the eviction are one step.
        _REFUSED_BY_AGENT_CAP.set(False)
        if requestor is not None:
            own = [sid for sid, owner in self._session_owners.items() if owner == requestor]
            if len(own) >= self.per_agent and not self._close_oldest_idle(own, requestor):
                _REFUSED_BY_AGENT_CAP.set(True)
                logger.warning("refusing a new MCP session for agent %s: it holds %d open sessions, its maximum "
                               "(INTERLOCK_HTTP_AGENT_MAX_SESSIONS=%d), each with a request in flight; %d sessions "
                               "are open in all (at most %s)", requestor["client_id"], len(own), self.per_agent,
                               len(self._server_instances), self.max_sessions)  # fmt: skip
                return None
        return super()._admit_session(requestor)

    def _close_oldest_idle(self, own: list[str], requestor: AuthorizationContext) -> bool:
        for session_id in own:  # oldest first: the SDK's dict keeps the order sessions were opened in
            transport = self._server_instances.get(session_id)
            # The SDK's idle countdown runs (a finite deadline) only once a session's opening request is
            # answered and while nothing is in flight: exactly the sessions that may be closed here.
            scope = None if transport is None else transport.idle_scope
            if scope is None or scope.deadline == math.inf:
                continue
            # Forgotten now (its id answers 404 from here on); cancelling its idle scope ends its server
            # task, whose own cleanup terminates the transport, exactly as an idle timeout would.
            self._server_instances.pop(session_id, None)
            self._session_owners.pop(session_id, None)
            scope.cancel()
            logger.info("agent %s opened a session past its maximum of %d: closed its oldest idle session %s",
                        requestor["client_id"], self.per_agent, session_id[:8])  # fmt: skip
            return True
        return False


def streamable_http_app(
    server: Server[Any], *, path: str, host: str, max_sessions: int, per_agent: int, idle_timeout_s: float
) -> Starlette:
    """What `Server.streamable_http_app()` builds without auth (we authenticate in front of it), on our manager."""
    security = None
    if host in ("127.0.0.1", "localhost", "::1"):  # the SDK's own DNS-rebinding protection for a local bind
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    manager = AgentSessionManager(server, per_agent=per_agent, security_settings=security,
                                  session_idle_timeout=idle_timeout_s, max_sessions=max_sessions)  # fmt: skip
    return Starlette(routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
                     lifespan=lambda app: manager.run())  # fmt: skip
