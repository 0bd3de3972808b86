"""`interlock shards check [NEW_MAP]` and `apply NEW_MAP`: changing the shard map without splitting a merchant
(SPEC §15, ADR 0014).

A merchant's intents live in exactly one shard's ledger, and the SIK deduplicates a repeated call only
against that ledger. So a map change that moves a merchant is refused while the merchant:

* has anything not definite (held, in flight, unknown, reconciling, quarantined, ...) in its current
  shard — that intent is owned by that shard's rail worker and reconciler until it settles; or
* has any intent at all in its current shard — its history would stay behind, and a repeat of an earlier
  call on the new shard would not be recognised. Carrying history between ledgers is not built; pin the
  merchant to its current shard in the new map instead (the refusal prints the line to add); or
* has anything in a shard's Redis — a proposal or Decision queued, taken by a worker, scheduled, or a
  reconcile hint: a call still on its way to its first answer.

`apply` runs the same check, then records the new map's ownership (its epoch, raised by one, and digest) in
every shard's ledger, each under its write lock and re-checked there, and only then replaces the map file.
From that commit on each rail worker admits only the merchants the map gives its shard (rail_worker.ownership:
SHARD_NOT_OWNER), so a Decision that slipped into the old shard's queue after the check is refused, not paid.
`check` without NEW_MAP compares every ledger with the current map.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from interlock.clock import now_ms
from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.mandate import MandateStore
from interlock.shards import ShardMap, load_shard_map, parse_shard_map
from ledger import ownership, replication
from ledger.db import open_ledger
from ledger.states import SETTLED
from ops import restore
from ops.shard_apply import apply_ownership, installed_text, ledger_epochs
from ops.shard_queues import UNREADABLE, RedisUnreadable, queued
from rails.base import RAIL_REST
from rails.razorpay import RazorpayClient


@dataclass(frozen=True)
class Move:
    merchant_id: str
    source: str
    target: str
    not_definite: dict[str, int] = field(default_factory=dict)  # state -> count, in the source shard
    settled: int = 0
    queued: tuple[str, ...] = ()  # what a shard's Redis holds for it ("s0: rail:s0 queued")

    @property
    def refusal(self) -> str | None:
        if self.queued:
            return (f"merchant {self.merchant_id} would move {self.source} -> {self.target} but a shard's Redis still "
                    f"holds work for it ({'; '.join(self.queued)}); let it drain (are {self.source}'s gate and rail "
                    "workers running?) and check again")
        if self.not_definite:
            states = ", ".join(f"{state} {count}" for state, count in sorted(self.not_definite.items()))
            return (f"merchant {self.merchant_id} would move {self.source} -> {self.target} but has intents not "
                    f"definite in {self.source} ({states}); let them settle (interlock status, the console) first")
        if self.settled:
            return (f"merchant {self.merchant_id} would move {self.source} -> {self.target} but has {self.settled} "
                    f"settled intent(s) in {self.source}, which would stay behind; pin it instead:\n"
                    f"    merchants:\n      {self.merchant_id}: {self.source}")
        return None


def plan_moves(current: ShardMap, new: ShardMap,
               in_redis: dict[str, dict[str, list[str]]] | None = None) -> list[Move]:  # fmt: skip
    """Every merchant the new map puts elsewhere: those with intents in any current ledger or work in any
    shard's Redis (*in_redis*: shard -> merchant -> places), and every merchant either map names explicitly."""
    found: dict[str, dict[str, dict[str, int]]] = {}  # shard -> merchant -> state -> count
    for shard in current.shards:
        found[shard.name] = _intents_by_merchant(shard.ledger)
    in_redis = in_redis or {}
    merchants = set(current.merchants) | set(new.merchants)
    for per_merchant in found.values():
        merchants |= set(per_merchant)
    for per_queue in in_redis.values():
        merchants |= set(per_queue) - {UNREADABLE}
    moves = []
    for merchant in sorted(merchants):
        source, target = current.shard_of(merchant), new.shard_of(merchant)
        if source == target:
            continue
        states = found.get(source, {}).get(merchant, {})
        not_definite = {s: n for s, n in states.items() if s not in SETTLED}
        settled = sum(n for s, n in states.items() if s in SETTLED)
        # Work for the merchant in any shard's Redis (a stale ingress may have routed it anywhere), and any job
        # nobody can attribute, which may be this merchant's.
        held = tuple(f"{shard}: {', '.join(places)}" for shard, per in sorted(in_redis.items())
                     for m, places in sorted(per.items()) if m in (merchant, UNREADABLE))  # fmt: skip
        moves.append(Move(merchant, source, target, not_definite, settled, held))
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


def _redis_work(current: ShardMap) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """What every current shard's Redis holds, per merchant; a Redis that cannot be read is a problem (nothing
    can be said of what it holds)."""
    found, problems = {}, []
    for shard in current.shards:
        try:
            found[shard.name] = queued(shard)
        except RedisUnreadable as exc:
            problems.append(f"{exc}; a merchant moves only when its shard's queues are known to hold nothing for it")
    return found, problems


@dataclass(frozen=True)
class Plan:
    new: ShardMap  # with the epoch it is applied under
    moves: list[Move]
    problems: list[str]


def plan(current: ShardMap, new: ShardMap) -> Plan:
    moves = plan_moves(current, new)
    problems: list[str] = []
    if moves:  # the queues matter only to a merchant that moves
        in_redis, unreadable = _redis_work(current)
        moves, problems = plan_moves(current, new, in_redis), unreadable
    problems = [*ledger_changes(current, new), *problems, *(m.refusal for m in moves if m.refusal is not None)]
    floor = max([current.epoch, *ledger_epochs(current, new).values()])
    epoch = new.epoch or floor + 1
    if epoch <= floor:
        problems.append(f"the new map says epoch {new.epoch}, but the current map or a shard's ledger is at epoch "
                        f"{floor}; leave `epoch:` out (apply sets {floor + 1}) or raise it")  # fmt: skip
    return Plan(replace(new, epoch=epoch), moves, problems)


def _check(current_path: Path, new_path: Path, *, install_at: Path | None = None) -> Plan | None:
    current, new = load_shard_map(current_path), load_shard_map(new_path)
    if install_at is not None:  # relative ledger paths are read from where the file will live
        new = parse_shard_map(new_path.read_text(encoding="utf-8"), source=str(new_path),
                              base_dir=install_at.resolve().parent)  # fmt: skip
    result = plan(current, new)
    for problem in result.problems:
        click.echo(f"refused: {problem}", err=True)
    if result.problems:
        refused = sum(m.refusal is not None for m in result.moves)
        click.echo(f"map change refused: {refused} of {len(result.moves)} moving merchant(s) cannot move"
                   + (", and more (above)" if len(result.problems) > refused else ""), err=True)  # fmt: skip
        return None
    for move in result.moves:
        click.echo(f"moves: {move.merchant_id} {move.source} -> {move.target} (no intents, nothing queued)")
    click.echo(f"map change allowed: {len(result.moves)} merchant(s) move, none with intents or queued work; "
               f"it would be applied as epoch {result.new.epoch}")  # fmt: skip
    return result


def check_ledgers(current: ShardMap) -> list[str]:
    """Every shard's ledger against the current map: it accepted this map (epoch and digest), it belongs to
    its shard, and every merchant with intents in it is one the map gives that shard."""
    problems = []
    digest = current.ownership.digest
    for shard in current.shards:
        if not shard.ledger.exists():
            click.echo(f"shard {shard.name}: no ledger yet at {shard.ledger}")
            continue
        conn = open_ledger(shard.ledger, readonly=True)
        try:
            accepted = ownership.accepted(conn)
            by_merchant = _intents_by_merchant(shard.ledger)
        finally:
            conn.close()
        if accepted is None:
            problems.append(f"shard {shard.name}: its ledger has accepted no shard map; record this one with "
                            f"`interlock shards apply {current.source}`")  # fmt: skip
        elif accepted.shard != shard.name:
            problems.append(f"shard {shard.name}: its ledger {shard.ledger} belongs to shard {accepted.shard}")
        elif accepted.digest != digest:
            problems.append(f"shard {shard.name}: its ledger accepted epoch {accepted.epoch} (digest "
                            f"{accepted.digest[:12]}), the map is epoch {current.epoch} (digest {digest[:12]}); "
                            "apply the map, or restore the map file the ledgers accepted")  # fmt: skip
        else:
            click.echo(f"shard {shard.name}: ledger accepted this map (epoch {accepted.epoch}, digest {digest[:12]})")
        for merchant, states in sorted(by_merchant.items()):
            home = current.shard_of(merchant)
            if home != shard.name:
                problems.append(f"merchant {merchant} has {sum(states.values())} intent(s) in shard {shard.name}'s "
                                f"ledger but the map gives it shard {home}: pin it back to {shard.name}")  # fmt: skip
    return problems


@click.group("shards")
def shards_group() -> None:
    """Check and apply a change to the shard map (INTERLOCK_SHARDS); restore a shard's ledger from its replica."""


@shards_group.command("check")
@click.argument("new_map", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--current", type=click.Path(path_type=Path), help="current map (default: $INTERLOCK_SHARDS)")
def check_command(new_map: Path | None, current: Path | None) -> None:
    """Say which merchants NEW_MAP moves; exit 1 if any of them cannot move (SPEC §15). Without NEW_MAP, check
    every shard's ledger against the current map; exit 1 on any disagreement."""
    if new_map is None:
        problems = check_ledgers(load_shard_map(_current(current)))
        for problem in problems:
            click.echo(f"problem: {problem}", err=True)
        click.echo(f"ledgers {'disagree with' if problems else 'agree with'} the map", err=bool(problems))
        if problems:
            sys.exit(1)
        return
    if _check(_current(current), new_map) is None:
        sys.exit(1)


@shards_group.command("apply")
@click.argument("new_map", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--current", type=click.Path(path_type=Path), help="current map (default: $INTERLOCK_SHARDS)")
def apply_command(new_map: Path, current: Path | None) -> None:
    """Check; record NEW_MAP (epoch raised) in every shard's ledger; then replace the current map file with it."""
    path = _current(current)
    result = _check(path, new_map, install_at=path)
    if result is None:
        sys.exit(1)
    refused = apply_ownership(load_shard_map(path), result.new, [(m.merchant_id, m.source) for m in result.moves])
    if refused:
        for problem in refused:
            click.echo(f"refused: {problem}", err=True)
        click.echo("map change refused under the ledgers' write locks: no ledger and no file changed", err=True)
        sys.exit(1)
    staged = path.with_name(path.name + ".new")
    staged.write_text(installed_text(new_map.read_text(encoding="utf-8"), result.new), encoding="utf-8")
    os.replace(staged, path)
    click.echo(f"applied: epoch {result.new.epoch} (digest {result.new.ownership.digest[:12]}) recorded in the "
               f"ledgers of {', '.join(result.new.names)}; {path} now holds {new_map}")  # fmt: skip
    click.echo("restart now: every ingress (it routes by the map it read at start; until then the moved merchants' "
               "calls are refused SHARD_NOT_OWNER or answered IN_PROGRESS, never paid twice)")
    click.echo("no restart needed: gate workers and rail workers follow the map their shard's ledger accepted; a rail "
               "worker started with another INTERLOCK_SHARDS file refuses every call (SHARD_MAP_STALE) until it is "
               "restarted with this one")
    click.echo("then: `interlock shards check` (no NEW_MAP) compares every ledger with the map")


@shards_group.command("restore")
@click.option("--replica", help="the shard's Litestream replica URL (s3://bucket/interlock/s0); omit with --resume")
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path),
              help="where the restored ledger goes (default: $INTERLOCK_LEDGER, or the shard's path in the map)")
@click.option("--resume", is_flag=True, help="finish a restore already started on --ledger (no Litestream restore)")
@click.option("--margin-ms", type=click.IntRange(min=0), default=restore.DEFAULT_MARGIN_MS, show_default=True,
              help="how far before the restored ledger's last commit the rail's lists are re-read")
@click.option("--old-machine-fenced", "fenced", is_flag=True,
              help="state that the lost machine can send nothing more to the rail (powered off, or its rail key "
                   "revoked); required")  # fmt: skip
def restore_command(replica: str | None, ledger_path: Path | None, resume: bool, margin_ms: int,
                    fenced: bool) -> None:  # fmt: skip
    """Restore a shard's ledger from its replica and read the rail for what the lost tail did, before any money
    moves (ADR 0029). The rail worker refuses the ledger until this has finished. The final read of the rail waits
    the call deadline plus the reconcile delay from the start, for the lost machine's last call to land."""
    if not fenced:
        raise ConfigError("--old-machine-fenced is required: restore a shard only once its old machine can send "
                          "nothing more to the rail (powered off, or cut off from it: a paused machine that wakes "
                          "up would pay again what the restored shard pays). Fence it, then run the restore with "
                          "--old-machine-fenced")  # fmt: skip
    settings = load_settings()
    shard_map = load_shard_map(settings.shards) if settings.shards is not None else None
    if ledger_path is None:
        ledger_path = shard_map.get(settings.shard).ledger if shard_map is not None else settings.require("ledger")
    if resume == (replica is not None):
        raise ConfigError("give --replica URL to restore into a new ledger, or --resume to finish one started")
    if replica is not None:
        if ledger_path.exists():
            raise ConfigError(f"{ledger_path} already exists: restore onto a new machine's path, or --resume")
        # Restored beside the final path and marked there (RESTORE_STARTED) before it takes the ledger's name: no rail
        # worker ever finds the restored file without the mark.
        staging = ledger_path.with_name(ledger_path.name + ".restoring")
        for stale in (staging, *(staging.with_name(staging.name + s) for s in ("-wal", "-shm"))):
            stale.unlink(missing_ok=True)
        replication.restore(replica, staging)
        conn = open_ledger(staging)
        try:
            restore.begin(conn, now=now_ms, actor=f"restore@{os.uname().nodename}", margin_ms=margin_ms)
        finally:
            conn.close()
        for suffix in ("-wal", "-shm"):  # SQLite removes them on the last close; if one remains it goes along
            side = staging.with_name(staging.name + suffix)
            if side.exists():
                os.replace(side, ledger_path.with_name(ledger_path.name + suffix))
        os.replace(staging, ledger_path)
        click.echo(f"restored {replica} into {ledger_path}; the rail worker refuses it until the rail is read")
    elif not ledger_path.exists():
        staging = ledger_path.with_name(ledger_path.name + ".restoring")
        hint = (f"; {staging} is a restore that stopped before it was marked (a broken chain?): remove it and restore "
                "with --replica again") if staging.exists() else ""  # fmt: skip
        raise ConfigError(f"--resume: {ledger_path} does not exist{hint}")
    mandates = [m for m in MandateStore.from_settings(settings).as_dict().values()
                if shard_map is None or shard_map.shard_of(m.merchant_id) == settings.shard]  # fmt: skip
    conn = open_ledger(ledger_path)
    try:
        with RazorpayClient.from_settings(settings) as rail:
            delay_s = settings.reconcile_min_delay_ms / 1000
            click.echo(f"reading the rail now, again in {settings.rail_timeout_ms / 1000:g} s (the call deadline) + "
                       f"{delay_s:g} s (the reconcile delay), when the lost machine's last call has landed, and the "
                       f"refunds finally {delay_s:g} s after that (a rail may list a refund a delay late)")  # fmt: skip
            report = restore.run(conn, rail, mandates, now=now_ms, actor=f"restore@{os.uname().nodename}",
                                 deadline_s=settings.rail_timeout_ms / 1000,
                                 reread_after_s=settings.reconcile_min_delay_ms / 1000,
                                 payouts=settings.rail == RAIL_REST)  # fmt: skip
    finally:
        conn.close()
    click.echo(f"restore finished on {ledger_path}: replica ended at audit seq {report.last_seq}; rail re-read from "
               f"{report.window_from_ms} ms ({report.entities_read} entities); {report.made_unknown} intents in "
               f"motion now UNKNOWN for the reconciler; {len(report.recovered)} recovered from the rail, "
               f"{len(report.settled)} settled, {len(report.quarantined)} quarantined")  # fmt: skip
    for found in report.recovered:
        click.echo(f"  recovered {found['tool']} {found['rail_entity_id']} ({found['amount_minor']} on "
                   f"{found['subject']}) as intent {found['sik']} of {found['merchant_id']}")  # fmt: skip
    for found in report.quarantined:
        click.echo(f"  QUARANTINED {found['sik']}: {found['rail_entity_id']} on other terms "
                   "(interlock quarantine list)")


@shards_group.command("follow")
@click.option("--replica", required=True, help="the shard's Litestream replica URL")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="the read-only copy to keep (point INTERLOCK_LEDGER or the map's ledger path of a reader at it)")
def follow_command(replica: str, out: Path) -> None:
    """Keep a read-only copy of a shard's ledger for readers on another host (ADR 0029): Litestream restores the
    replica and follows it. Never give the copy to a rail worker: it is behind the primary by design."""
    if out.exists():
        raise ConfigError(f"{out} already exists: a follow copy starts from an empty path (remove the old copy)")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = replication.follow_command(replica, out)
    os.execv(command[0], command)  # Litestream itself, so a supervisor stops and restarts the process it started
