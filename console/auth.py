"""The console's one lock: INTERLOCK_CONSOLE_TOKEN, presented as `Authorization: Bearer <token>` or
through the login form, which sets a cookie derived from the token (never the token itself).

Every form also carries a CSRF value derived from the token; the session cookie is SameSite=Strict
and HttpOnly. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

COOKIE = "interlock_console"
MIN_TOKEN_LENGTH = 16
PUBLIC_PATHS = frozenset({"/login", "/healthz"})


class ConsoleAuth:
    def __init__(self, token: str) -> None:
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"INTERLOCK_CONSOLE_TOKEN must be at least {MIN_TOKEN_LENGTH} characters")
        self._token = token.encode("utf-8")
        self.session_value = self._derive("session-v1")
        self.csrf_value = self._derive("csrf-v1")

    def _derive(self, purpose: str) -> str:
        return hmac.new(self._token, f"interlock-console:{purpose}".encode(), hashlib.sha256).hexdigest()

    def token_matches(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode("utf-8"), self._token)

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer ") and self.token_matches(header[7:].strip()):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie, self.session_value)

    def csrf_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented, self.csrf_value)


def safe_next(target: str | None) -> str:
    """Only a local path may be a post-login redirect target (no open redirect)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"
