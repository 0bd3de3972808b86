"""`interlock sandbox`: run the Razorpay-compatible sandbox rail."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from sandbox.faults import Fault, FaultConfigError, FaultSet, parse_cli_fault, parse_fault
from sandbox.journal import JOURNAL_FILENAME, Journal
from sandbox.rail import Rail
from sandbox.seed import DEMO, SeedError, load_seed_file, seed_if_new
from sandbox.server import PortInUse, bind, serve

logger = logging.getLogger(__name__)

# Sandbox-only credentials, used when neither the flags nor INTERLOCK_RAIL_KEY_* are set, so a
# fresh clone's client and sandbox agree with no setup. They open nothing but this sandbox.
DEFAULT_KEY_ID = "rzp_test_interlock"
DEFAULT_KEY_SECRET = "interlock_sandbox_secret"


@click.command("sandbox")
@click.option("--port", type=int, required=True, help="TCP port to serve on (0 picks a free one)")
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="directory for the journal (created if missing)",
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
) -> None:
    """Run a Razorpay-compatible rail with a durable journal and fault profiles (see docs/sandbox.md)."""
    if not logging.getLogger().handlers:
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=fmt)
    try:
        profiles = _profiles(faults)
        seed_data: dict[str, Any] = load_seed_file(seed_file) if seed_file else DEMO
    except (FaultConfigError, SeedError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        sock = bind(host, port)
    except PortInUse as exc:
        raise click.ClickException(str(exc.strerror)) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(data_dir / JOURNAL_FILENAME)
    try:
        seed_if_new(journal, seed_data, str(seed_file) if seed_file else "demo")
    except SeedError as exc:
        raise click.UsageError(str(exc)) from None
    rail = Rail(
        journal=journal,
        faults=FaultSet(profiles, seed),
        key_id=key_id or os.environ.get("INTERLOCK_RAIL_KEY_ID") or DEFAULT_KEY_ID,
        key_secret=key_secret or os.environ.get("INTERLOCK_RAIL_KEY_SECRET") or DEFAULT_KEY_SECRET,
    )
    try:
        serve(rail, sock, ready_file=ready_file)
    finally:
        journal.close()


def _profiles(specs: tuple[str, ...]) -> list[Fault]:
    return [parse_fault(parse_cli_fault(spec)) for spec in specs]
