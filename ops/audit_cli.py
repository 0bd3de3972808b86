"""`interlock audit verify|export`: check the audit chain in a ledger or in an exported bundle, and export one.

The ledger owns the chain and `verify_chain()`; a bundle is an operator artefact (ops/bundle.py), so the
command that reads either one lives here, beside the bundle code, and the ledger imports nothing of ops.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from interlock.config import load_settings
from interlock.shards import load_shard_map
from ledger import audit
from ledger.db import open_ledger
from ops.bundle import export_bundle, verify_bundle


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
    """Verify every record of the audit chain (every shard's, with a shard map); exit 1 naming the first bad seq."""
    if bundle is not None:
        _verify_bundle(bundle)
        return
    shards_file = load_settings().shards if ledger is None else None
    if shards_file is not None:  # every shard's chain, each named; a broken one does not stop the others
        results = [_verify_ledger(s.ledger, shard=s.name) for s in load_shard_map(shards_file).shards]
        if not all(results):
            sys.exit(1)
        return
    if not _verify_ledger(_ledger_path(ledger)):
        sys.exit(1)


def _verify_ledger(path: Path, *, shard: str | None = None) -> bool:
    """Print whether *path*'s chain holds (prefixed with its shard, if any); False when it does not."""
    prefix = "" if shard is None else f"shard {shard}: "
    conn = open_ledger(path, readonly=True)
    try:
        bad = audit.verify_chain(conn)
        if bad is not None:
            click.echo(f"{prefix}chain broken at seq {bad} ({path})", err=True)
            return False
        click.echo(f"{prefix}chain ok: {audit.count(conn)} records")
        return True
    finally:
        conn.close()


def _verify_bundle(bundle: Path) -> None:
    """`interlock audit verify --bundle PATH`: exit 1 naming the first bad record."""
    report = verify_bundle(bundle)
    if not report.ok:
        for problem in report.problems:
            click.echo(problem, err=True)
        sys.exit(1)
    head = report.head or {"seq": 0, "hash": "-"}
    click.echo(f"bundle ok: {report.records} records, head seq {head['seq']} hash {head['hash']}")


@audit_group.command("export")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="bundle path: NAME.tar or a directory")
@click.option("--ledger", type=click.Path(path_type=Path), help="ledger file (default: $INTERLOCK_LEDGER)")
def export_command(out: Path, ledger: Path | None) -> None:
    """Export the audit chain and the rows it covers as a bundle `audit verify --bundle` checks standalone."""
    conn = open_ledger(_ledger_path(ledger), readonly=True)
    try:
        manifest = export_bundle(conn, out)
    finally:
        conn.close()
    head = manifest["head"] or {"seq": 0, "hash": "-"}
    click.echo(f"exported {out}: {head['seq']} records, head {head['hash']}")
