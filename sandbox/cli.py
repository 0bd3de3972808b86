"""`interlock sandbox`: run the Razorpay-compatible sandbox rail."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from sandbox.faults import Fault, FaultConfigError, FaultSet, parse_cli_fault, parse_fault
from sandbox.journal import JOURNAL_FILENAME, Journal
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER, Rail
from sandbox.seed import DEMO, SeedError, load_seed_file, seed_if_new
from sandbox.server import PortInUse, bind, serve
from sandbox.webhooks import WebhookSender

logger = logging.getLogger(__name__)

# Sandbox-only credentials, used when neither the flags nor INTERLOCK_RAIL_KEY_* are set, so a
# fresh clone's client and sandbox agree with no setup. They open nothing but this sandbox.
DEFAULT_KEY_ID = "rzp_test_interlock"
DEFAULT_KEY_SECRET = "interlock_sandbox_secret"
# The account its webhooks name when INTERLOCK_RAIL_ACCOUNT_ID does not say (Razorpay: acc_ + 14 characters).
DEFAULT_ACCOUNT_ID = "acc_SandboxRail001"


@click.command("sandbox")
@click.option("--port", type=int, help="TCP port to serve on (0 picks a free one)  [required]")
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="directory for the journal (created if missing)  [required without --mcp]",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind")
@click.option(
    "--seed-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="YAML of payments and balance, applied on first start only (default: demo payments)",
)
@click.option("--key-id", help="basic-auth key id [env INTERLOCK_RAIL_KEY_ID, else rzp_test_interlock]")
@click.option("--key-secret", help="basic-auth secret [env INTERLOCK_RAIL_KEY_SECRET, else interlock_sandbox_secret]")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="NAME=RATE[,param=value...]",
    help="fault profile active from the start, e.g. slow=1,delay_ms=3000 (repeatable)",
)
@click.option("--seed", "seed", type=int, default=0, show_default=True, help="seed of the fault generator")
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write {host, port, pid} here once the port is bound (used by sandbox.testing)",
)
@click.option(
    "--webhook-url",
    help="POST Razorpay-style webhooks here, signed with INTERLOCK_WEBHOOK_SECRETS' first secret "
    "[env INTERLOCK_SANDBOX_WEBHOOK_URL]",
)
@click.option(
    "--lifecycle-ms",
    type=click.IntRange(min=0),
    help="a refund is answered pending and a settlement created, each final this long later (0: processed in the "
    "answer; docs/sandbox.md) [env INTERLOCK_SANDBOX_LIFECYCLE_MS, else 0]",
)
@click.option(
    "--account-number",
    help="the RazorpayX account payouts are made from (their `account_number`) "
    f"[env INTERLOCK_SANDBOX_ACCOUNT_NUMBER, else {DEFAULT_ACCOUNT_NUMBER}]",
)
@click.option("--mcp", is_flag=True, help="serve the MCP front (Razorpay MCP tool names) over a running sandbox")
@click.option("--stdio", is_flag=True, help="with --mcp: serve MCP on stdin/stdout instead of HTTP")
@click.option("--rail-url", help="with --mcp: the sandbox's origin [env INTERLOCK_RAIL_URL]")
@click.option(
    "--manifest-overrides",
    type=click.Path(dir_okay=False, path_type=Path),
    help="with --mcp: JSON {tool: {description: ...}} re-read on every request (the manifest-poisoning fault)",
)
@click.option(
    "--mcp-profile",
    type=click.Choice(["sandbox", "razorpay-mcp-server"]),
    default=None,
    help="with --mcp: the tool contract the front serves [env INTERLOCK_SANDBOX_MCP_PROFILE, else sandbox]",
)
def sandbox_command(
    port: int,
    data_dir: Path,
    host: str,
    seed_file: Path | None,
    key_id: str | None,
    key_secret: str | None,
    faults: tuple[str, ...],
    seed: int,
    ready_file: Path | None,
    webhook_url: str | None,
    lifecycle_ms: int | None,
    account_number: str | None,
    mcp: bool,
    stdio: bool,
    rail_url: str | None,
    manifest_overrides: Path | None,
    mcp_profile: str | None,
) -> None:
    """Run a Razorpay-compatible rail with a durable journal and fault profiles (see docs/sandbox.md).

    With --mcp, run instead an MCP server in front of a running sandbox (see docs/proxy.md)."""
    if not logging.getLogger().handlers:
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=fmt)
    key_id = key_id or os.environ.get("INTERLOCK_RAIL_KEY_ID") or DEFAULT_KEY_ID
    key_secret = key_secret or os.environ.get("INTERLOCK_RAIL_KEY_SECRET") or DEFAULT_KEY_SECRET
    if mcp:
        _serve_mcp_front(host, port, stdio, rail_url, key_id, key_secret, manifest_overrides, ready_file,
                         mcp_profile)  # fmt: skip
        return
    if port is None:
        raise click.UsageError("Missing option '--port'.")
    if data_dir is None:
        raise click.UsageError("Missing option '--data'.")
    try:
        profiles = _profiles(faults)
        seed_data: dict[str, Any] = load_seed_file(seed_file) if seed_file else DEMO
    except (FaultConfigError, SeedError) as exc:
        raise click.UsageError(str(exc)) from None
    account = _account_number(account_number)
    try:
        sock = bind(host, port)
    except PortInUse as exc:
        raise click.ClickException(str(exc.strerror)) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(data_dir / JOURNAL_FILENAME)
    try:
        seed_if_new(journal, seed_data, str(seed_file) if seed_file else "demo", account_number=account)
    except SeedError as exc:
        raise click.UsageError(str(exc)) from None
    fault_set = FaultSet(profiles, seed)
    rail = Rail(
        journal=journal,
        faults=fault_set,
        key_id=key_id,
        key_secret=key_secret,
        webhooks=_webhook_sender(webhook_url or os.environ.get("INTERLOCK_SANDBOX_WEBHOOK_URL"), fault_set),
        lifecycle_ms=_lifecycle_ms(lifecycle_ms),
        account_number=account,
    )
    try:
        serve(rail, sock, ready_file=ready_file)
    finally:
        journal.close()


def _lifecycle_ms(given: int | None) -> int:
    if given is not None:
        return given
    text = os.environ.get("INTERLOCK_SANDBOX_LIFECYCLE_MS", "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise click.UsageError(f"INTERLOCK_SANDBOX_LIFECYCLE_MS={text!r}: give a whole number of milliseconds (0: off)")
    return int(text)


def _account_number(given: str | None) -> str:
    number = given or os.environ.get("INTERLOCK_SANDBOX_ACCOUNT_NUMBER", "").strip() or DEFAULT_ACCOUNT_NUMBER
    if not re.fullmatch(r"[A-Za-z0-9]{4,40}", number):
        raise click.UsageError(f"account number {number!r}: give 4-40 letters or digits, as RazorpayX numbers them")
    return number


def _webhook_sender(url: str | None, faults: FaultSet) -> WebhookSender | None:
    if not url:
        return None
    secrets = [s.strip() for s in os.environ.get("INTERLOCK_WEBHOOK_SECRETS", "").split(",") if s.strip()]
    if not secrets:
        raise click.UsageError("--webhook-url needs INTERLOCK_WEBHOOK_SECRETS: the sandbox signs each delivery with "
                               "its first secret, as Razorpay signs with the webhook's secret")  # fmt: skip
    if not url.startswith(("http://", "https://")):
        raise click.UsageError(f"--webhook-url {url!r}: give an http(s) URL")
    account = os.environ.get("INTERLOCK_RAIL_ACCOUNT_ID") or DEFAULT_ACCOUNT_ID
    return WebhookSender(url, secrets[0], account, faults=faults)


def _profiles(specs: tuple[str, ...]) -> list[Fault]:
    return [parse_fault(parse_cli_fault(spec)) for spec in specs]


def _serve_mcp_front(
    host: str, port: int | None, stdio: bool, rail_url: str | None, key_id: str, key_secret: str,
    overrides: Path | None, ready_file: Path | None, profile: str | None,
) -> None:  # fmt: skip
    from sandbox.mcp_front import Front
    from sandbox.mcp_serve import serve_front_http, serve_front_stdio

    url = rail_url or os.environ.get("INTERLOCK_RAIL_URL")
    if not url:
        raise click.UsageError("--mcp needs the sandbox's origin: --rail-url or INTERLOCK_RAIL_URL")
    try:
        front = Front(url, key_id, key_secret, overrides=overrides, profile=profile)
    except ValueError as exc:  # an unknown INTERLOCK_SANDBOX_MCP_PROFILE
        raise click.UsageError(str(exc)) from None
    if stdio:
        serve_front_stdio(front)
        return
    if port is None:
        raise click.UsageError("Missing option '--port' (or use --stdio).")
    try:
        serve_front_http(front, host, port, ready_file=ready_file)
    except PortInUse as exc:
        raise click.ClickException(str(exc.strerror)) from None
