"""`interlock webhooks [--host 127.0.0.1] [--port 8720]`: the Razorpay webhook receiver as a process (SPEC §17)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from interlock.config import Settings, load_settings
from interlock.errors import ConfigError
from ledger import webhook_inbox

logger = logging.getLogger(__name__)


def inbox_path(settings: Settings) -> Path:
    """INTERLOCK_WEBHOOK_INBOX, else webhooks.sqlite3 beside the ledger."""
    path = webhook_inbox.inbox_path(settings.webhook_inbox, settings.ledger)
    if path is not None:
        return path
    raise ConfigError("INTERLOCK_WEBHOOK_INBOX is not set (nor INTERLOCK_LEDGER, beside which it would go): the "
                      "receiver stores every accepted event there before answering",
                      variable="INTERLOCK_WEBHOOK_INBOX")  # fmt: skip


@click.command("webhooks")
@click.option("--host", default="127.0.0.1", show_default=True, help="bind address (keep it loopback; front it with "
              "a TLS proxy that Razorpay can reach)")
@click.option("--port", type=int, default=8720, show_default=True)
def webhooks_command(host: str, port: int) -> None:
    """Receive Razorpay webhooks at POST /webhooks/razorpay: verified against INTERLOCK_WEBHOOK_SECRETS, stored in
    the inbox before they are acknowledged. Served under the connection limits every listener has
    (interlock.http_serve: INTERLOCK_HTTP_MAX_CONNECTIONS, _HEADER_TIMEOUT_MS, _BODY_TIMEOUT_MS)."""
    from interlock.http_serve import bind, guard_for, reserve_file_descriptors, serve
    from webhooks.receiver import PATH, Receiver, create_app
    from webhooks.signature import parse_secrets

    settings = load_settings()
    secrets = parse_secrets(settings.webhook_secrets)
    inbox = inbox_path(settings)
    reserve_file_descriptors(settings, "webhook receiver")
    sock = bind(host, port)
    receiver = Receiver(inbox, secrets, rate_per_second=settings.webhook_rate)
    logger.info("webhooks on http://%s:%d%s (inbox %s, %d secret(s); at most %d connections)", host,
                sock.getsockname()[1], PATH, inbox, len(secrets), settings.http_max_connections)  # fmt: skip
    try:
        serve(create_app(receiver), sock, guard_for(settings, "webhook receiver"))
    finally:
        receiver.close()
