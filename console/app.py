"""The console application: routes, the token lock, templates and the /metrics endpoint."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import redis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from console import actions, pages
from console.auth import COOKIE, PUBLIC_PATHS, SESSION_MS, ConsoleAuth, Principal, safe_next
from console.render import render
from console.sessions import SessionStore
from interlock.errors import ConfigError, InterlockError
from ops.approvers import ApproverTable
from ops.context import OpsContext
from ops.format import format_minor, format_ms
from ops.metrics import build_registry, shard_sources

logger = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"


class TokenLock(BaseHTTPMiddleware):
    """Everything but the login page and the health check needs a credential (cookie or bearer); the principal
    it proves is request.state.principal (console.auth)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        auth: ConsoleAuth = request.app.state.auth
        principal = await run_in_threadpool(auth.principal, request)  # reads INTERLOCK_APPROVERS
        request.state.principal = principal
        if request.url.path in PUBLIC_PATHS or principal is not None:
            return await call_next(request)
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            # A browser gets the login form, still with 401: the page itself was refused.
            return render(request, "login.html", {"next": request.url.path, "error": None}, status_code=401)
        return PlainTextResponse("401: a console or approver token is required", status_code=401,
                                 headers={"WWW-Authenticate": 'Bearer realm="interlock-console"'})  # fmt: skip


async def login_page(request: Request) -> Response:
    if request.method == "GET":
        return render(request, "login.html", {"next": safe_next(request.query_params.get("next")), "error": None})
    form = await request.form()
    auth: ConsoleAuth = request.app.state.auth
    target = safe_next(str(form.get("next") or "/"))
    principal = await run_in_threadpool(auth.principal_for_token, str(form.get("token") or "").strip())
    if principal is None:
        logger.warning("console login refused from %s", request.client.host if request.client else "?")
        return render(request, "login.html", {"next": target, "error": "That token is not right."}, status_code=401)
    try:
        session = await run_in_threadpool(auth.open_session, principal)
    except (InterlockError, sqlite3.Error) as exc:
        logger.error("console login of %s refused: the session cannot be recorded (%s)", principal.name, exc)
        return render(request, "login.html", {"next": target, "error": "The console cannot record a session now "
                                              f"({exc}); use a bearer token or try again."}, status_code=503)
    logger.info("console login: %s", principal.name)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/", max_age=SESSION_MS // 1000)
    return response


async def logout(request: Request) -> Response:
    """Revoke the session the cookie names, on the server (a copy of the cookie opens nothing afterwards), then
    delete the cookie. No CSRF value is asked for: ending a session is what anyone holding its cookie may do."""
    auth: ConsoleAuth = request.app.state.auth
    cookie = request.cookies.get(COOKIE, "")
    response = RedirectResponse("/login", status_code=303)
    if cookie:
        try:
            ended = await run_in_threadpool(auth.end_session, cookie)
        except (InterlockError, sqlite3.Error) as exc:
            # Say so rather than pretend it ended: the cookie is kept, so that logging out can be tried again.
            logger.error("console logout could not revoke the session (%s); it stays open until it expires", exc)
            return PlainTextResponse(f"503: the session could not be ended on the server ({exc}); try again",
                                     status_code=503)  # fmt: skip
        principal: Principal | None = getattr(request.state, "principal", None)
        logger.info("console logout: %s%s", principal.name if principal else "?", "" if ended else " (not open)")
    response.delete_cookie(COOKIE, path="/")
    return response


def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)


def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


def _approvers(ctx: OpsContext) -> ApproverTable | None:
    if ctx.settings.approvers is None:
        return None
    try:
        return ctx.approvers()
    except ConfigError as exc:
        logger.error("approver logins refused: %s", exc)  # a broken file decides nothing; say so loudly
        return None


def create_app(ctx: OpsContext, token: str) -> Starlette:
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.filters.update(money=format_minor, ts=format_ms)
    routes = [
        Route("/login", login_page, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/metrics", metrics),
        Route("/", pages.intents_page),
        Route("/intents/{merchant_id}/{sik}", pages.intent_page),
        Route("/holds", pages.holds_page),
        Route("/holds/{merchant_id}/{sik}/approve", actions.approve, methods=["POST"]),
        Route("/holds/{merchant_id}/{sik}/reject", actions.reject, methods=["POST"]),
        Route("/quarantine", pages.quarantine_page),
        Route("/quarantine/{merchant_id}/{sik}/resolve", actions.resolve, methods=["POST"]),
        Route("/intents/{merchant_id}/{sik}/acknowledge", actions.acknowledge, methods=["POST"]),
        Route("/audit", pages.audit_page),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(TokenLock)])
    app.state.ctx = ctx
    # Sessions live in one ledger every console process agrees on (console.sessions): the first shard's.
    app.state.auth = ConsoleAuth(token, lambda: _approvers(ctx), SessionStore(lambda: ctx.shards()[0].ledger_path))
    app.state.templates = templates
    url = ctx.settings.redis_url
    # No PING here: the console starts (and shows the ledger) while Redis is down; scrapes just omit queues.
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5) if url else None
    app.state.registry = build_registry(shard_sources(ctx.settings, client))
    return app
