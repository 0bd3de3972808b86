"""The streamable HTTP transport at /mcp, behind bearer-token authentication (SPEC §10).

The middleware wraps the SDK's whole ASGI app: a request without a known token is answered 401 before
any MCP code sees it. An authenticated request carries its agent in the ASGI scope, where the tool
handler reads it from the request that delivered the message, and as the SDK's `AuthenticatedUser`, so
the SDK's session manager binds each MCP session to the agent that opened it. An authenticated POST's body
is read here first, bounded and checked for duplicate keys (ingress.frames), then handed on to the SDK.

OAuth is not offered: agents present a static bearer token. So the OAuth discovery documents under
/.well-known/ (RFC 9728 protected-resource metadata, RFC 8414 / OIDC authorization-server metadata) answer
404, not 401: a client that probes them learns there is no OAuth here and sends its configured header,
instead of starting an authorization flow that cannot succeed (several clients ignore configured headers
once discovery answers anything else).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingress.app import AGENT_SCOPE_KEY, QUEUE_POOL_SIZE, Ingress
from ingress.frames import MAX_MESSAGE_BYTES, refusal
from ingress.server import build_server
from ingress.sessions import streamable_http_app
from ingress.tokens import TokenTable
from interlock.http_serve import bind, guard_for, reserve_file_descriptors, serve

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
WELL_KNOWN_PREFIX = "/.well-known/"
TOO_LARGE = {"error": "payload_too_large", "detail": f"the body exceeds {MAX_MESSAGE_BYTES} bytes"}
NO_OAUTH = "OAuth is not configured on this server; send a static token as `Authorization: Bearer <token>`"


class BearerAuth:
    """ASGI middleware: `Authorization: Bearer <token>` → agent_id, or 401. Never a default agent."""

    def __init__(self, app: ASGIApp, tokens: TokenTable) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # lifespan: starts the SDK's session manager
            return
        if str(scope.get("path", "")).startswith(WELL_KNOWN_PREFIX):
            await _answer(send, 404, {"error": "not_found", "detail": NO_OAUTH})
            return
        token = _bearer(scope)
        agent_id = None if token is None else self.tokens.agent_for(token)
        if agent_id is None:
            # Say which, never echo the token.
            reason = "missing bearer token" if token is None else "unknown bearer token"
            client = scope.get("client")
            logger.warning("HTTP 401 for %s %s from %s: %s", scope.get("method"), scope.get("path"), client, reason)
            await _unauthorized(reason, send)
            return
        scope[AGENT_SCOPE_KEY] = agent_id
        scope["user"] = AuthenticatedUser(AccessToken(token=agent_id, client_id=agent_id, scopes=[]))
        if scope.get("method") == "POST":
            body = await _checked_body(scope, receive, send)
            if body is None:
                return  # answered (too large, ambiguous) or the client went away
            receive = _replay(body, receive)
        await self.app(scope, receive, send)


def _content_length(scope: Scope) -> int:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return int(value) if value.isdigit() else 0  # h11 has already refused a malformed one
    return 0


async def _checked_body(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The whole request body, read here so its size is bounded and a duplicate key is refused before
    the SDK parses it last-wins (ingress.frames); None once answered with 413 / 400 or disconnected."""
    chunks: list[bytes] = []
    size = 0
    if _content_length(scope) > MAX_MESSAGE_BYTES:
        await _answer(send, 413, TOO_LARGE)
        return None
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            await _answer(send, 413, TOO_LARGE)
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    error = refusal(body, full=False)
    if error is not None:
        await _answer(send, 400, error.model_dump(by_alias=True, exclude_unset=True))
        return None
    return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the SDK the body already read, then waits on the client (for a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


async def _unauthorized(reason: str, send: Send) -> None:
    # RFC 6750 §3: a request without credentials gets the bare challenge; one with a token we do not know
    # also gets error="invalid_token".
    challenge = 'Bearer realm="interlock"'
    if not reason.startswith("missing"):
        challenge += ', error="invalid_token"'
    await _answer(send, 401, {"error": "unauthorized", "detail": reason}, [(b"www-authenticate", challenge.encode())])


async def _answer(send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def build_app(ingress: Ingress, tokens: TokenTable, host: str) -> ASGIApp:
    settings = ingress.settings
    app = streamable_http_app(build_server(ingress), path=MCP_PATH, host=host,
                              max_sessions=settings.http_max_sessions, per_agent=settings.http_agent_max_sessions,
                              idle_timeout_s=settings.http_session_idle_ms / 1000)  # fmt: skip
    return BearerAuth(app, tokens)


def serve_http(ingress: Ingress, tokens: TokenTable, host: str, port: int) -> None:
    settings = ingress.settings
    # Per shard: the wait pool (one connection per admitted wait) and the queue pool.
    reserve_file_descriptors(settings, "ingress",
                             extra=len(ingress.routes) * (settings.ingress_max_money_calls + QUEUE_POOL_SIZE))
    sock = bind(host, port)
    actual_port = sock.getsockname()[1]
    app = build_app(ingress, tokens, host)
    logger.info("ingress listening on http://%s:%d%s (%d agent tokens; at most %d connections, %d sessions, %d per "
                "agent)", host, actual_port, MCP_PATH, len(tokens.digests), settings.http_max_connections,
                settings.http_max_sessions, settings.http_agent_max_sessions)  # fmt: skip
    serve(app, sock, guard_for(settings, "ingress"), lifespan="on")
