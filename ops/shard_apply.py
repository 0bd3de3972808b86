"""Recording a shard map in every shard's ledger (`interlock shards apply`, SPEC §15, ADR 0014).

Every ledger's write lock is taken first (BEGIN IMMEDIATE, in shard-name order), the moving merchants'
intents are counted again under those locks — a Decision admitted between `check` and here would otherwise
go unseen — and only then is the map's ownership written to each ledger with its audit record. From each
commit on that shard's rail worker admits only what the map gives it (rail_worker.ownership).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from interlock.clock import now_ms
from interlock.errors import ConfigError
from interlock.shards import ShardMap, parse_shard_map
from ledger import ownership
from ledger.db import open_ledger


def ledgers_of(current: ShardMap, new: ShardMap) -> dict[str, Path]:
    """Each shard of the new map, and each shard the new map drops whose ledger exists (it then owns nothing)."""
    out = {s.name: s.ledger for s in new.shards}
    for shard in current.shards:
        if shard.name not in out and shard.ledger.exists():
            out[shard.name] = shard.ledger
    return dict(sorted(out.items()))


def ledger_epochs(current: ShardMap, new: ShardMap) -> dict[str, int]:
    """The epoch each existing ledger accepted (a ledger that accepted none is left out)."""
    out = {}
    for name, path in ledgers_of(current, new).items():
        if not path.exists():
            continue
        conn = open_ledger(path, readonly=True)
        try:
            accepted = ownership.accepted(conn)
        finally:
            conn.close()
        if accepted is not None:
            out[name] = accepted.epoch
    return out


def apply_ownership(current: ShardMap, new: ShardMap, moves: list[tuple[str, str]]) -> list[str]:
    """Record *new*'s ownership in every ledger, or nothing and the reasons why. *moves*: (merchant, source)."""
    conns: dict[str, sqlite3.Connection] = {}
    try:
        for name, path in ledgers_of(current, new).items():
            conns[name] = conn = open_ledger(path)
            conn.execute("BEGIN IMMEDIATE")  # held until every ledger has been checked and written
        problems = _recheck(conns, new, moves)
        if not problems:
            now = now_ms()
            for name, conn in conns.items():
                ownership.accept(conn, name, new.ownership, now=now)
            for conn in conns.values():
                conn.execute("COMMIT")
        return problems
    finally:
        for conn in conns.values():
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            conn.close()


def _recheck(conns: dict[str, sqlite3.Connection], new: ShardMap, moves: list[tuple[str, str]]) -> list[str]:
    problems = []
    for merchant, source in moves:
        conn = conns.get(source)
        states = ownership.intents_by_state(conn, merchant) if conn is not None else {}
        if states:
            listed = ", ".join(f"{s} {n}" for s, n in sorted(states.items()))
            problems.append(f"merchant {merchant} was admitted in {source} since the check ({listed}); "
                            "it stays there: check again")  # fmt: skip
    for name, conn in conns.items():
        accepted = ownership.accepted(conn)
        if accepted is not None and accepted.epoch >= new.epoch:
            problems.append(f"shard {name}'s ledger accepted epoch {accepted.epoch} meanwhile (another apply?); "
                            "check again")  # fmt: skip
    return problems


def installed_text(text: str, new: ShardMap) -> str:
    """The operator's map text with its `epoch:` set (comments kept); the map re-rendered when that cannot be
    done by editing lines (a flow-style document, say)."""
    lines = [line for line in text.splitlines() if not line.startswith("epoch:")]
    edited = "\n".join(lines).rstrip("\n") + f"\nepoch: {new.epoch}  # set by interlock shards apply\n"
    try:
        parsed = parse_shard_map(edited)
    except ConfigError:
        parsed = None
    if parsed is not None and parsed.ownership == new.ownership:
        return edited
    return new.to_yaml()
