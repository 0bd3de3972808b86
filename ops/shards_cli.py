"""`interlock shards check|apply NEW_MAP`: changing the shard map without splitting a merchant (SPEC §15).

A merchant's intents live in exactly one shard's ledger, and the SIK deduplicates a repeated call only
against that ledger. So a map change that moves a merchant is refused while the merchant:

* has anything not definite (held, in flight, unknown, reconciling, quarantined, ...) in its current
  shard — that intent is owned by that shard's rail worker and reconciler until it settles; or
* has any intent at all in its current shard — its history would stay behind, and a repeat of an earlier
  call on the new shard would not be recognised. Carrying history between ledgers is not built; pin the
  merchant to its current shard in the new map instead (the refusal prints the line to add).

So the moves this allows are of merchants with no intents yet — which covers the usual change, adding a
shard: pin every existing merchant the new hash would move, and new merchants spread by hash. `apply` runs
the same check and, when it passes, replaces the map file; restart the ingress (it reads the map at start)
with no traffic for the moving merchants in between, then run `check` again.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.shards import ShardMap, load_shard_map, parse_shard_map
from ledger.db import open_ledger
from ledger.states import SETTLED


@dataclass(frozen=True)
class Move:
    merchant_id: str
    source: str
    target: str
    not_definite: dict[str, int] = field(default_factory=dict)  # state -> count, in the source shard
    settled: int = 0

    @property
    def refusal(self) -> str | None:
        if self.not_definite:
            states = ", ".join(f"{state} {count}" for state, count in sorted(self.not_definite.items()))
            return (f"merchant {self.merchant_id} would move {self.source} -> {self.target} but has intents not "
                    f"definite in {self.source} ({states}); let them settle (interlock status, the console) first")
        if self.settled:
            return (f"merchant {self.merchant_id} would move {self.source} -> {self.target} but has {self.settled} "
                    f"settled intent(s) in {self.source}, which would stay behind; pin it instead:\n"
                    f"    merchants:\n      {self.merchant_id}: {self.source}")
        return None


def plan_moves(current: ShardMap, new: ShardMap) -> list[Move]:
    """Every merchant the new map puts elsewhere: those with intents in any current ledger, and every
    merchant either map names explicitly."""
    found: dict[str, dict[str, dict[str, int]]] = {}  # shard -> merchant -> state -> count
    for shard in current.shards:
        found[shard.name] = _intents_by_merchant(shard.ledger)
    merchants = set(current.merchants) | set(new.merchants)
    for per_merchant in found.values():
        merchants |= set(per_merchant)
    moves = []
    for merchant in sorted(merchants):
        source, target = current.shard_of(merchant), new.shard_of(merchant)
        if source == target:
            continue
        states = found.get(source, {}).get(merchant, {})
        not_definite = {s: n for s, n in states.items() if s not in SETTLED}
        settled = sum(n for s, n in states.items() if s in SETTLED)
        moves.append(Move(merchant, source, target, not_definite, settled))
    return moves


def _intents_by_merchant(ledger: Path) -> dict[str, dict[str, int]]:
    if not ledger.exists():
        return {}  # a shard that has never run holds nothing
    conn = open_ledger(ledger, readonly=True)
    try:
        out: dict[str, dict[str, int]] = {}
        rows = conn.execute("SELECT merchant_id, state, COUNT(*) FROM intents GROUP BY merchant_id, state")
        for merchant, state, count in rows:
            out.setdefault(merchant, {})[state] = int(count)
        return out
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read the ledger {ledger} to check the map change: {exc}") from None
    finally:
        conn.close()


def _current(current: Path | None) -> Path:
    path = current or load_settings().shards
    if path is None:
        raise ConfigError("no current shard map: pass --current or set INTERLOCK_SHARDS", variable="INTERLOCK_SHARDS")
    return path


def ledger_changes(current: ShardMap, new: ShardMap) -> list[str]:
    """A shard kept under the same name must keep its ledger: its history and lease are in that file."""
    problems = []
    for shard in current.shards:
        if shard.name in new.names and (moved := new.get(shard.name).ledger) != shard.ledger:
            problems.append(f"shard {shard.name}'s ledger would change from {shard.ledger} to {moved}; "
                            "move the file (and restore it there), not the map")  # fmt: skip
    return problems


def _check(current_path: Path, new_path: Path, *, install_at: Path | None = None) -> bool:
    current, new = load_shard_map(current_path), load_shard_map(new_path)
    if install_at is not None:  # relative ledger paths are read from where the file will live
        new = parse_shard_map(new_path.read_text(encoding="utf-8"), source=str(new_path),
                              base_dir=install_at.resolve().parent)  # fmt: skip
    moves = plan_moves(current, new)
    refused = [m for m in moves if m.refusal is not None]
    problems = [*ledger_changes(current, new), *(m.refusal for m in refused if m.refusal is not None)]
    for problem in problems:
        click.echo(f"refused: {problem}", err=True)
    if problems:
        click.echo(f"map change refused: {len(refused)} of {len(moves)} moving merchant(s) cannot move"
                   + (", and a shard's ledger would change" if len(problems) > len(refused) else ""), err=True)
        return False
    for move in moves:
        click.echo(f"moves: {move.merchant_id} {move.source} -> {move.target} (no intents yet)")
    click.echo(f"map change allowed: {len(moves)} merchant(s) move, none with intents")
    return True


@click.group("shards")
def shards_group() -> None:
    """Check and apply a change to the shard map (INTERLOCK_SHARDS)."""


@shards_group.command("check")
@click.argument("new_map", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--current", type=click.Path(path_type=Path), help="current map (default: $INTERLOCK_SHARDS)")
def check_command(new_map: Path, current: Path | None) -> None:
    """Say which merchants NEW_MAP moves; exit 1 if any of them cannot move (SPEC §15)."""
    if not _check(_current(current), new_map):
        sys.exit(1)


@shards_group.command("apply")
@click.argument("new_map", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--current", type=click.Path(path_type=Path), help="current map (default: $INTERLOCK_SHARDS)")
def apply_command(new_map: Path, current: Path | None) -> None:
    """Check, then replace the current map file with NEW_MAP (atomically); restart the ingress to route by it."""
    path = _current(current)
    if not _check(path, new_map, install_at=path):
        sys.exit(1)
    staged = path.with_name(path.name + ".new")
    staged.write_text(new_map.read_text(encoding="utf-8"), encoding="utf-8")
    os.replace(staged, path)
    click.echo(f"applied: {path} now holds {new_map}; restart the ingress to route by it")
