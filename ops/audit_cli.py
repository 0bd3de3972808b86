"""`interlock audit ...`: verify the ledger's audit chain from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from interlock.config import load_settings
from ledger import audit
from ledger.db import open_ledger


def _ledger_path(ledger: Path | None) -> Path:
    if ledger is not None:
        return ledger
    path: Path = load_settings().require("ledger")
    return path


@click.group("audit")
def audit_group() -> None:
    """Inspect and verify the tamper-evident audit chain."""


@audit_group.command("verify")
@click.option("--ledger", type=click.Path(path_type=Path), help="ledger file (default: $INTERLOCK_LEDGER)")
@click.option("--bundle", type=click.Path(exists=True, path_type=Path), help="an exported bundle (no ledger needed)")
def verify_command(ledger: Path | None, bundle: Path | None) -> None:
    """Verify every record of the audit chain; exit 1 naming the first bad seq."""
    if bundle is not None:
        # Bundles are an operator artefact (ops/bundle.py); imported only when asked for.
        from ops.cli import verify_bundle_command

        verify_bundle_command(bundle)
        return
    conn = open_ledger(_ledger_path(ledger), readonly=True)
    try:
        bad = audit.verify_chain(conn)
        if bad is not None:
            click.echo(f"chain broken at seq {bad}", err=True)
            sys.exit(1)
        click.echo(f"chain ok: {audit.count(conn)} records")
    finally:
        conn.close()
