"""The ledger replicated off the machine with the real Litestream binary (ledger/replication.py; issue 29, ADR 0029).

A real ledger file in WAL mode, a real `litestream replicate` process shipping it to a replica directory "on another
disk", SIGKILLed as the machine would be lost; the replica restored into a new path on a "new machine" holds every
commit shipped before the loss, and its audit chain verifies. What a restored ledger still lacks (the tail after the
last shipped commit) is the restore protocol's business, not Litestream's.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from deploy.shard_layout import ShardPlan
from deploy.up import _programs
from ledger import audit, replication
from ledger.db import open_ledger
from ops.status_cli import replication_report
from tests.ledger.helpers import put_intent
from tests.procs import wait_until


def _write(ledger: Path, start: int, count: int) -> None:
    conn = open_ledger(ledger)
    try:
        for i in range(start, start + count):
            put_intent(conn, f"{i:032d}", "APPLIED", amount=100 + i, subject=f"pay_R{i:012d}", now=1_000 + i)
    finally:
        conn.close()


def _intents(ledger: Path) -> int:
    conn = open_ledger(ledger, readonly=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM intents").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def primary(tmp_path: Path) -> tuple[Path, Path, str]:
    machine = tmp_path / "machine-a"
    machine.mkdir()
    ledger = machine / "ledger.sqlite3"
    _write(ledger, 0, 5)
    replica_url = (tmp_path / "other-disk" / "s0").as_uri()
    return ledger, replication.write_config(machine, ledger, replica_url, sync_interval="100ms"), replica_url


def test_a_replicated_ledger_survives_its_machine(primary: tuple[Path, Path, str], tmp_path: Path) -> None:
    ledger, config, replica_url = primary
    streaming = subprocess.Popen(replication.replicate_command(config), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        _write(ledger, 5, 20)  # written while Litestream streams

        def shipped() -> replication.ReplicaPosition | None:
            found = replication.position(config, ledger)
            return found if found.replica_txid is not None and found.behind == 0 else None

        wait_until(lambda: shipped() is not None and _restorable(replica_url, tmp_path) == 25, timeout=60,
                   what="every commit on the replica")  # fmt: skip
        report = replication_report(ledger, now=0)
        assert report is not None and report["behind_txids"] == 0 and report["replica_txid"] >= 1, report
    finally:
        os.killpg(streaming.pid, signal.SIGKILL)  # the machine is gone, Litestream with it
        streaming.wait(10)
    restored = replication.restore(replica_url, tmp_path / "machine-b" / "ledger.sqlite3")
    assert _intents(restored) == 25
    conn = open_ledger(restored, readonly=True)
    try:
        assert audit.verify_chain(conn) is None  # the chain as it was shipped, whole
    finally:
        conn.close()
    with pytest.raises(replication.ReplicationError, match="already exists"):
        replication.restore(replica_url, restored)  # a restore never overwrites a ledger


_probe = iter(range(10**6))


def _restorable(replica_url: str, tmp_path: Path) -> int:
    """How many intents a restore of the replica would give now (into a scratch path)."""
    out = tmp_path / "probe" / f"{next(_probe)}.sqlite3"
    try:
        return _intents(replication.restore(replica_url, out))
    except replication.ReplicationError:
        return -1


def test_a_replica_url_must_be_a_url_and_each_shard_has_its_own_path() -> None:
    with pytest.raises(replication.ReplicationError, match="must be a URL"):
        replication.check_replica_url("/mnt/backup")
    assert replication.shard_replica_url("s3://bucket/ledgers/", "s1", sharded=True) == "s3://bucket/ledgers/s1"
    assert replication.shard_replica_url("file:///mnt/b", "0", sharded=False) == "file:///mnt/b"


def test_interlock_up_runs_litestream_beside_each_shard_s_rail_worker(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLOCK_REPLICA_URL", "file:///mnt/backup/interlock")
    plans = [ShardPlan(f"s{i}", tmp_path / f"s{i}", f"redis://127.0.0.1:{9000 + i}/0", None) for i in range(2)]
    for plan in plans:
        plan.directory.mkdir()
    programs = {p.name: p for p in _programs(tmp_path, plans, 1, False, 0, 0, sharded=True)}
    for plan in plans:
        program = programs[f"litestream-{plan.name}"]
        # Run without AWS_CA_BUNDLE, which Litestream cannot use (replication.litestream_env).
        assert program.command[:3] == ["env", "-u", "AWS_CA_BUNDLE"]
        assert program.command[4:6] == ["replicate", "-config"]
        config = Path(program.command[6]).read_text(encoding="utf-8")
        assert str(plan.ledger.resolve()) in config and f"file:///mnt/backup/interlock/{plan.name}" in config
    monkeypatch.delenv("INTERLOCK_REPLICA_URL")
    assert not any(name.startswith("litestream") for name in (p.name for p in _programs(tmp_path, plans, 1, False, 0,
                                                                                         0, sharded=True)))


def test_a_follow_copy_answers_interlock_status_behind_the_primary_never_ahead(primary: tuple[Path, Path, str],
                                                                              tmp_path: Path) -> None:
    """An ingress on another host reads the shard's ledger through a follow copy (`interlock shards follow`). It may
    answer an older state or NOT_FOUND — both say RETRY_SAME_CALL, which the SIK makes safe — and catches up."""
    from ingress.status import _lookup

    ledger, config, replica_url = primary
    streaming = subprocess.Popen(replication.replicate_command(config), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    copy = tmp_path / "reader-host" / "ledger.sqlite3"
    following: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: replication.position(config, ledger).replica_txid is not None, timeout=60,
                   what="the first state on the replica")  # fmt: skip
        copy.parent.mkdir()
        following = subprocess.Popen(replication.follow_command(replica_url, copy), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        wait_until(lambda: copy.exists() and _intents(copy) == 5, timeout=60, what="the follow copy")
        sik = f"{5:032d}"
        assert _lookup(copy, "acc_DEMO000001", sik, None)["state"] == "NOT_FOUND"  # not written yet anywhere
        _write(ledger, 5, 1)  # the primary applies it; the reader's copy catches up
        wait_until(lambda: _lookup(copy, "acc_DEMO000001", sik, None)["state"] == "APPLIED", timeout=60,
                   what="the follow copy to show the new intent")  # fmt: skip
    finally:
        for process in (streaming, following):
            if process is not None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
