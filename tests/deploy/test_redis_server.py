"""The embedded redis-server starts from any data directory a caller names, relative ones included."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from deploy.redis_server import EmbeddedRedis


def test_a_relative_data_directory_starts_the_server_and_keeps_its_log_there(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # redis-server changes into --dir before it opens --logfile: a relative log path named from the caller's
    # directory would point nowhere and the server would exit without a word (`--work data/...` did this).
    monkeypatch.chdir(tmp_path)
    server = EmbeddedRedis(Path("work/redis"), appendonly=False).start()
    try:
        assert redis.Redis(port=server.port).ping()
        assert (tmp_path / "work" / "redis" / "redis.log").exists()
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None
