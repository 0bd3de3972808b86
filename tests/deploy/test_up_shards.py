"""`interlock up --shards 3 --demo` (SPEC §15): three full shards on one machine, each its own embedded Redis,
ledger and actors; one ingress routing by the map it wrote; the demo passes against every shard and each
shard's ledger holds its own merchant's intents and nothing else."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from interlock.ports import free_port, port_in_use
from interlock.shards import load_shard_map
from tests.procs import wait_until

REPO = Path(__file__).resolve().parents[2]


def consecutive_free_ports(count: int) -> int:
    for _ in range(100):
        base = free_port()
        if base + count < 65536 and not any(port_in_use(base + i) for i in range(count)):
            return base
    raise AssertionError(f"no {count} consecutive free ports")


def ledger_rows(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [(m, s) for m, s in conn.execute("SELECT merchant_id, state FROM intents")]
    finally:
        conn.close()


def test_up_with_three_shards_runs_the_demo_against_every_shard_and_keeps_them_apart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    redis_base = consecutive_free_ports(3)
    others: list[int] = []
    while len(others) < 4:  # distinct from each other and from the three Redis ports
        port = free_port()
        if port not in others and not redis_base <= port < redis_base + 3:
            others.append(port)
    ports = {"sandbox": others[0], "ingress": others[1], "console": others[2], "webhooks": others[3],
             **{f"redis-s{i}": redis_base + i for i in range(3)}}  # fmt: skip
    args = [sys.executable, "-m", "interlock.cli", "up", "--shards", "3", "--demo", "--gate-workers", "1",
            "--data", str(data), "--sandbox-port", str(ports["sandbox"]), "--ingress-port", str(ports["ingress"]),
            "--redis-port", str(redis_base), "--console-port", str(ports["console"]),
            "--webhook-port", str(ports["webhooks"])]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("INTERLOCK_")}
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: "interlock: serving" in log.read_text() or up.poll() is not None, timeout=300,
                   what="the sharded stack to serve")  # fmt: skip
        text = log.read_text()
        assert up.poll() is None, text[-5000:]  # still serving (an early exit shows why)
        assert "interlock: stack ready" in text, text[-3000:]
        assert text.count("\ndemo: 9 passed, 0 failed\n") == 3, text[-5000:]
        for shard in ("s0", "s1", "s2"):
            assert f"\nshard {shard}:\n" in text
            assert f"  {shard}     redis://127.0.0.1:" in text  # the readiness table's shard rows
        assert all(port_in_use(p) for p in ports.values())
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
        up.wait(90)
    assert "interlock: stopped" in log.read_text()

    shard_map = load_shard_map(data / "shards.yaml")  # the map it used, written where INTERLOCK_SHARDS pointed
    assert shard_map.names == ["s0", "s1", "s2"]
    for shard in shard_map.shards:
        merchant = f"acc_DEMO000001_{shard.name}"
        assert shard_map.shard_of(merchant) == shard.name
        assert shard.ledger == data / shard.name / "ledger.sqlite3"
        rows = ledger_rows(shard.ledger)
        assert rows and {m for m, _ in rows} == {merchant}, rows  # its merchant's intents, and no other's
        assert {s for _, s in rows} == {"APPLIED"}

    deadline = time.monotonic() + 30
    while any(port_in_use(p) for p in ports.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(port_in_use(p) for p in ports.values()), "every actor must be stopped"
