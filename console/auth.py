"""Who is asking (ADR 0015). Two kinds of credential open the console:

* an approver's own token (INTERLOCK_APPROVERS, ops.approvers): that person — the only kind that may approve
  or reject a hold, resolve a quarantine or acknowledge an attention (for the merchants whose mandates name them:
  ops.approvers.approver_problem), and every such action records their id;
* INTERLOCK_CONSOLE_TOKEN: the console itself, for looking (pages, /metrics, screenshots) — it decides
  nothing, so a leaked console token approves nothing.

Either is presented as `Authorization: Bearer <token>` on each request, or once through the login form, which
opens a session: a random id (256 bits) in an HttpOnly, SameSite=Strict cookie that never contains a token, and a
row in the ledger (console.sessions) keyed by the id's sha256. Every request's cookie is checked against that row,
so the session is what the server says it is, on every console process and across restarts:

* it authenticates nobody once logout has revoked it, SESSION_MS after login, or once the token it was opened with
  is rotated or removed (the row names the token's sha256; the approvers file is re-read on every request);
* every form carries a CSRF value that is a MAC keyed by the secret the request proved — the session id, or the
  bearer token — so a value from one session is refused in any other session, the same person's included.

Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from console.sessions import SessionStore
from interlock.clock import now_ms
from interlock.errors import ConfigError, InterlockError
from ledger.console_sessions import APPROVER, CONSOLE
from ops.approvers import Approver, ApproverTable, token_sha256

logger = logging.getLogger(__name__)

COOKIE = "interlock_console"
MIN_TOKEN_LENGTH = 16
PUBLIC_PATHS = frozenset({"/login", "/healthz"})
SESSION_MS = 12 * 3600 * 1000
CONSOLE_PRINCIPAL = "console"
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32): an older cookie's shape is not one


@dataclass(frozen=True, slots=True)
class Principal:
    """The console token (approver None: may look, may not decide) or one authenticated approver.

    *proof* is the secret this request presented (a session id, or a bearer token): the CSRF value is keyed by it."""

    approver: Approver | None = None
    proof: str = field(default="", repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.approver.approver_id if self.approver else CONSOLE_PRINCIPAL


class ConsoleAuth:
    """Who each request is (`principal`), and the sessions a login opens and a logout ends (console.sessions)."""

    def __init__(self, token: str, approvers: Callable[[], ApproverTable | None], sessions: SessionStore) -> None:
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"INTERLOCK_CONSOLE_TOKEN must be at least {MIN_TOKEN_LENGTH} characters")
        self._token = token.encode("utf-8")
        self._token_sha256 = token_sha256(token)
        self._approvers = approvers  # re-read per request (ops.approvers: a removed credential stops at once)
        self._sessions = sessions

    def _table(self) -> ApproverTable | None:
        try:
            return self._approvers()
        except ConfigError:
            return None  # no (or a broken) INTERLOCK_APPROVERS: nobody can act; the console token still looks

    def principal_for_token(self, presented: str) -> Principal | None:
        table = self._table()
        approver = table.authenticate(presented) if table is not None else None
        if approver is not None:
            return Principal(approver, proof=presented)
        if hmac.compare_digest(presented.encode("utf-8"), self._token):
            return Principal(proof=presented)
        return None

    def open_session(self, principal: Principal, now: int | None = None) -> str:
        """Record a session for *principal* (just authenticated by its token) and return the cookie's value.
        Raises LedgerError when the ledger that keeps sessions cannot be written."""
        approver = principal.approver
        return self._sessions.open(kind=APPROVER if approver else CONSOLE,
                                   approver_id=approver.approver_id if approver else None,
                                   credential_sha256=approver.token_sha256 if approver else self._token_sha256,
                                   now=now if now is not None else now_ms(), lifetime_ms=SESSION_MS)  # fmt: skip

    def end_session(self, cookie: str, now: int | None = None) -> bool:
        """Revoke the session this cookie names, whoever it was; False if it was not open."""
        if not _SESSION_ID.match(cookie):
            return False
        return self._sessions.revoke(cookie, now if now is not None else now_ms())

    def _from_cookie(self, cookie: str, now: int) -> Principal | None:
        if not _SESSION_ID.match(cookie):
            return None
        try:
            session = self._sessions.live(cookie, now)
        except (InterlockError, sqlite3.Error) as exc:
            logger.warning("console sessions cannot be read (%s): a session cookie authenticates nobody", exc)
            return None
        if session is None:
            return None
        if session.kind == CONSOLE:
            current = hmac.compare_digest(session.credential_sha256, self._token_sha256)
            return Principal(proof=cookie) if current else None
        table = self._table()
        digest = table.digests.get(session.approver_id or "") if table is not None else None
        if digest is None or not hmac.compare_digest(digest, session.credential_sha256):
            return None  # the credential it was opened with was rotated or removed since
        return Principal(Approver(session.approver_id or "", digest), proof=cookie)

    def principal(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return self.principal_for_token(header[7:].strip())
        cookie = request.cookies.get(COOKIE, "")
        return self._from_cookie(cookie, now_ms()) if cookie else None

    def csrf_value(self, principal: Principal | None) -> str:
        if principal is None or not principal.proof:
            return ""
        return hmac.new(principal.proof.encode("utf-8"), b"interlock-console:csrf-v3", hashlib.sha256).hexdigest()

    def csrf_ok(self, principal: Principal, presented: str | None) -> bool:
        expected = self.csrf_value(principal)
        # As bytes: compare_digest refuses a str that is not ASCII, and a form field may be anything.
        return bool(expected) and presented is not None and hmac.compare_digest(presented.encode(), expected.encode())


def safe_next(target: str | None) -> str:
    """Only a local path may be a post-login redirect target (no open redirect)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"
