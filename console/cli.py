"""`interlock console`: the operator web console as a process (loopback by default)."""

from __future__ import annotations

import logging

import click

from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.redis_conn import port_in_use

logger = logging.getLogger(__name__)


@click.command("console")
@click.option("--host", default="127.0.0.1", show_default=True, help="bind address (keep it loopback; front it "
              "with a TLS proxy to reach it from elsewhere)")
@click.option("--port", type=int, default=8750, show_default=True)
def console_command(host: str, port: int) -> None:
    """Serve the operator console; INTERLOCK_CONSOLE_TOKEN unlocks it."""
    import uvicorn

    from console.app import create_app
    from ops.context import OpsContext

    settings = load_settings()
    token: str = settings.require("console_token")
    if port_in_use(port):
        raise ConfigError(f"console port {port} on {host} is already in use; pass --port", variable="--port")
    try:
        app = create_app(OpsContext.from_settings(settings), token)
    except ValueError as exc:
        raise ConfigError(str(exc), variable="INTERLOCK_CONSOLE_TOKEN") from None
    logger.info("console on http://%s:%d/", host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning")
