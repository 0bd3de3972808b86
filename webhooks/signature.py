"""`X-Razorpay-Signature`: the hex HMAC-SHA256 of the raw request body under the webhook secret (SPEC §17).

Verified over the bytes as received, before anything parses them, and compared in constant time against every
configured secret: after a rotation Razorpay still delivers older events signed with the old one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from interlock.errors import ConfigError

SECRETS_ENV = "INTERLOCK_WEBHOOK_SECRETS"
MIN_SECRET_CHARS = 16


def sign(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(body: bytes, signature: str | None, secrets: Sequence[str]) -> bool:
    """True when *signature* is *body*'s HMAC under one of *secrets*. Every secret is tried (no early exit), so
    the time taken does not say which one matched, or how much of a forged signature was right."""
    if not signature:
        return False
    given = signature.strip().lower().encode("ascii", "replace")
    matched = False
    for secret in secrets:
        matched |= hmac.compare_digest(sign(body, secret).encode("ascii"), given)
    return matched


def parse_secrets(value: str | None) -> tuple[str, ...]:
    """INTERLOCK_WEBHOOK_SECRETS: comma-separated, all accepted (the first is the current one)."""
    if value is None or not value.strip():
        raise ConfigError(f"{SECRETS_ENV} is not set: the webhook receiver verifies every delivery against it (the "
                          "secret set on Razorpay's dashboard for this webhook; several, comma-separated, while a "
                          "secret is rotated)", variable=SECRETS_ENV)  # fmt: skip
    secrets = tuple(s.strip() for s in value.split(","))
    if any(not s for s in secrets):
        raise ConfigError(f"{SECRETS_ENV} has an empty entry (two commas, or a trailing one)", variable=SECRETS_ENV)
    short = [i + 1 for i, s in enumerate(secrets) if len(s) < MIN_SECRET_CHARS]
    if short:
        raise ConfigError(f"{SECRETS_ENV}: secret(s) {short} are shorter than {MIN_SECRET_CHARS} characters; a "
                          "webhook secret that short can be guessed", variable=SECRETS_ENV)  # fmt: skip
    return secrets
