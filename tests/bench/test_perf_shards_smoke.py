"""Smoke run of `interlock bench perf --shards` as real processes, so the shards bench cannot rot: tiny counts,
two shard counts, every call APPLIED, the table and the RESULTS line in their documented shape. Speed is
never asserted here; it goes to RESULTS.md only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_shards_bench_measures_each_shard_count_and_writes_its_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    out = subprocess.run(
        [sys.executable, "-m", "interlock.cli", "bench", "perf", "--shards", "1,2", "--shard-rail-concurrency", "2",
         "--latency-ms", "20", "--shard-clients", "2", "--shard-calls", "2", "--results", str(results),
         "--work", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "shards 1, rail concurrency   2: 4/4 APPLIED" in out.stdout
    assert "shards 2, rail concurrency   2: 8/8 APPLIED" in out.stdout
    section = results.read_text()
    assert re.search(r"^shards: 1 -> \d+\.\d/s, 2 -> \d+\.\d/s at 20 ms rail \(rail concurrency 2\)$", section, re.M)
    assert "on **" in section and "CPUs**" in section  # the machine's core count is stated
    assert "<!-- perf-shards:begin -->" in section
