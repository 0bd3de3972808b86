"""`interlock console`: the operator web console as a process (loopback by default), and
`interlock console screenshot`: a picture of a running console (docs/console.png is made with it, on purpose,
never by a test run)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import click

from interlock.config import load_settings
from interlock.errors import ConfigError

logger = logging.getLogger(__name__)

# Debian's chromium, driven headless (never a browser downloaded by playwright: `make browser` installs it).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


@click.group("console", invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="bind address (keep it loopback; front it "
              "with a TLS proxy to reach it from elsewhere)")
@click.option("--port", type=int, default=8750, show_default=True)
@click.pass_context
def console_command(ctx: click.Context, host: str, port: int) -> None:
    """Serve the operator console: INTERLOCK_CONSOLE_TOKEN lets one look; an approver's own token (INTERLOCK_APPROVERS)
    lets that person decide."""
    if ctx.invoked_subcommand is not None:
        return
    from console.app import create_app
    from interlock.http_serve import bind, guard_for, reserve_file_descriptors, serve
    from ops.context import OpsContext

    settings = load_settings()
    token: str = settings.require("console_token")
    reserve_file_descriptors(settings, "console")
    sock = bind(host, port)
    ops = OpsContext.from_settings(settings)
    if settings.approvers is None:
        logger.warning("INTERLOCK_APPROVERS is not set: the console shows everything and nobody can decide a hold")
    else:
        ops.approvers()  # a bad credentials file fails here, naming it, not at the first login
    try:
        app = create_app(ops, token)
    except ValueError as exc:
        raise ConfigError(str(exc), variable="INTERLOCK_CONSOLE_TOKEN") from None
    logger.info("console on http://%s:%d/ (at most %d connections)", host, sock.getsockname()[1],
                settings.http_max_connections)  # fmt: skip
    serve(app, sock, guard_for(settings, "console"))


@console_command.command("screenshot")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, help="PNG file to write")
@click.option("--url", default="http://127.0.0.1:8750", show_default=True, help="the running console")
@click.option("--page", default="/", show_default=True, help="console page to picture, e.g. /intents/MERCHANT/SIK")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="file holding the console token (default: INTERLOCK_CONSOLE_TOKEN)")
def screenshot_command(out: Path, url: str, page: str, token_file: Path | None) -> None:
    """Log in to a running console with its token and save a full-page PNG of PAGE."""
    token = token_file.read_text(encoding="utf-8").strip() if token_file else load_settings().require("console_token")
    if shutil.which(CHROMIUM) is None:
        raise ConfigError(f"{CHROMIUM} is missing; run `make browser` (apt-get install chromium)", variable="--out")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ConfigError("playwright is not installed; pip install -e '.[dev]'", variable="--out") from None
    target = url.rstrip("/") + "/" + page.lstrip("/")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            view = browser.new_page(viewport={"width": 1360, "height": 900})
            view.goto(target)
            if view.locator("#token").is_visible():  # the console answers 401 with its login form
                view.fill("#token", token)
                with view.expect_navigation():
                    view.click("#login")
                if view.locator("#token").is_visible():
                    raise ConfigError(f"the console at {url} refused the token", variable="INTERLOCK_CONSOLE_TOKEN")
            view.wait_for_load_state("networkidle")
            out.parent.mkdir(parents=True, exist_ok=True)
            view.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()
    click.echo(f"wrote {out} ({target})")
