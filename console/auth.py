"""Who is asking (ADR 0015). Two kinds of credential open the console:

* an approver's own token (INTERLOCK_APPROVERS, ops.approvers): that person — the only kind that may approve
  or reject a hold or resolve a quarantine, and every such action records their id;
* INTERLOCK_CONSOLE_TOKEN: the console itself, for looking (pages, /metrics, screenshots) — it decides
  nothing, so a leaked console token approves nothing.

Either is presented as `Authorization: Bearer <token>` or through the login form, which sets a cookie that
never contains a token: `<kind>.<approver id>.<issued ms>.<mac>`, the mac keyed by a random secret of this
console process (so a restart ends every session, and the console token cannot forge one) over the approver's
current token hash (so rotating or removing a credential ends its sessions at once). A session lasts at most
SESSION_MS. Every form carries a CSRF value bound to the principal; the cookie is SameSite=Strict and HttpOnly.
Comparisons are constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

from interlock.clock import now_ms
from interlock.errors import ConfigError
from ops.approvers import Approver, ApproverTable

COOKIE = "interlock_console"
MIN_TOKEN_LENGTH = 16
PUBLIC_PATHS = frozenset({"/login", "/healthz"})
SESSION_MS = 12 * 3600 * 1000
CONSOLE_PRINCIPAL = "console"


@dataclass(frozen=True, slots=True)
class Principal:
    """The console token (approver None: may look, may not decide) or one authenticated approver."""

    approver: Approver | None = None

    @property
    def name(self) -> str:
        return self.approver.approver_id if self.approver else CONSOLE_PRINCIPAL

    @property
    def key(self) -> str:
        return f"approver:{self.approver.approver_id}:{self.approver.token_sha256}" if self.approver else "console"


class ConsoleAuth:
    def __init__(self, token: str, approvers: Callable[[], ApproverTable | None]) -> None:
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"INTERLOCK_CONSOLE_TOKEN must be at least {MIN_TOKEN_LENGTH} characters")
        self._token = token.encode("utf-8")
        self._approvers = approvers  # re-read per request (ops.approvers: a removed credential stops at once)
        self._key = secrets.token_bytes(32)

    def _mac(self, purpose: str) -> str:
        return hmac.new(self._key, f"interlock-console:{purpose}".encode(), hashlib.sha256).hexdigest()

    def _table(self) -> ApproverTable | None:
        try:
            return self._approvers()
        except ConfigError:
            return None  # no (or a broken) INTERLOCK_APPROVERS: nobody can act; the console token still looks

    def principal_for_token(self, presented: str) -> Principal | None:
        table = self._table()
        approver = table.authenticate(presented) if table is not None else None
        if approver is not None:
            return Principal(approver)
        if hmac.compare_digest(presented.encode("utf-8"), self._token):
            return Principal()
        return None

    def session_value(self, principal: Principal, now: int | None = None) -> str:
        issued = now if now is not None else now_ms()
        who = base64.urlsafe_b64encode(principal.name.encode()).decode().rstrip("=") if principal.approver else "-"
        kind = "a" if principal.approver else "c"
        return f"{kind}.{who}.{issued}.{self._mac(f'session-v2:{principal.key}:{issued}')}"

    def _from_cookie(self, cookie: str, now: int) -> Principal | None:
        parts = cookie.split(".")
        if len(parts) != 4 or not parts[2].isdigit() or not 0 <= now - int(parts[2]) < SESSION_MS:
            return None
        kind, who, issued, mac = parts
        principal: Principal | None = Principal() if (kind, who) == ("c", "-") else None
        if kind == "a":
            try:
                approver_id = base64.urlsafe_b64decode(who + "=" * (-len(who) % 4)).decode()
            except (ValueError, UnicodeDecodeError):
                return None
            table = self._table()
            digest = table.digests.get(approver_id) if table is not None else None
            principal = Principal(Approver(approver_id, digest)) if digest is not None else None
        if principal is None:
            return None
        return principal if hmac.compare_digest(mac, self._mac(f"session-v2:{principal.key}:{issued}")) else None

    def principal(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return self.principal_for_token(header[7:].strip())
        cookie = request.cookies.get(COOKIE, "")
        return self._from_cookie(cookie, now_ms()) if cookie else None

    def csrf_value(self, principal: Principal | None) -> str:
        return self._mac(f"csrf-v2:{principal.key}") if principal is not None else ""

    def csrf_ok(self, principal: Principal, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented, self.csrf_value(principal))


def safe_next(target: str | None) -> str:
    """Only a local path may be a post-login redirect target (no open redirect)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"
