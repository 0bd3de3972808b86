"""Sharding at the ingress (SPEC §15): each call goes to its merchant's shard's Redis, waits for the outcome
on that Redis, and interlock_status reads that shard's ledger — never another shard's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.redis_server import EmbeddedRedis
from ledger.db import open_ledger
from tests.ingress.helpers import (
    DEMO_MERCHANT,
    TestResponder,
    applied_outcome,
    error_of,
    gates_queue_length,
    stdio_client_for,
)
from tests.ledger.helpers import put_intent

pytestmark = pytest.mark.anyio

SIK_HERE = "HEREAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
SIK_ELSEWHERE = "ELSEWHEREAAAAAAAAAAAAAAAAAAAAAAA"


@pytest.fixture
def second_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis-b", appendonly=False).start()
    yield server
    server.stop()


@pytest.fixture
def sharded_env(env: dict[str, str], redis_server: EmbeddedRedis, second_redis: EmbeddedRedis,
                tmp_path: Path) -> dict[str, str]:  # fmt: skip
    """Two shards; the demo agent's merchant is assigned to shard b. No REDIS_URL or INTERLOCK_LEDGER:
    with a map, the ingress takes both from it."""
    shard_map = tmp_path / "shards.yaml"
    shard_map.write_text(
        "shards:\n"
        f"  a: {{redis_url: '{redis_server.url}', ledger: a/ledger.sqlite3}}\n"
        f"  b: {{redis_url: '{second_redis.url}', ledger: b/ledger.sqlite3}}\n"
        f"merchants:\n  {DEMO_MERCHANT}: b\n"
    )
    routed = {k: v for k, v in env.items() if k not in ("REDIS_URL", "INTERLOCK_LEDGER")}
    return {**routed, "INTERLOCK_SHARDS": str(shard_map)}


async def test_a_money_call_is_enqueued_and_answered_on_its_merchants_shard_only(
    sharded_env, errlog, redis_server: EmbeddedRedis, second_redis: EmbeddedRedis, rclient
) -> None:
    with TestResponder(second_redis.url, shard="b") as responder:  # shard b's own queue, gates:b
        async with stdio_client_for(sharded_env, errlog) as client:
            result = await client.call_tool("create_refund", {"payment_id": "pay_29QQoUBi66xm2f", "amount": 1000})
    assert not result.is_error, result
    [proposal] = responder.proposals
    assert proposal.merchant_id == DEMO_MERCHANT
    assert result.structured_content == applied_outcome(proposal).structured()
    assert gates_queue_length(rclient, "a", "b") == 0  # shard a's Redis never saw it


async def test_interlock_status_reads_the_merchants_shard_ledger_and_no_other(sharded_env, errlog,
                                                                            tmp_path: Path) -> None:  # fmt: skip
    for shard, sik in (("b", SIK_HERE), ("a", SIK_ELSEWHERE)):
        (tmp_path / shard).mkdir()
        conn = open_ledger(tmp_path / shard / "ledger.sqlite3")
        try:
            put_intent(conn, sik, "APPLIED", amount=500)  # same merchant, one intent in each ledger
        finally:
            conn.close()
    async with stdio_client_for(sharded_env, errlog) as client:
        here = await client.call_tool("interlock_status", {"sik": SIK_HERE})
        elsewhere = await client.call_tool("interlock_status", {"sik": SIK_ELSEWHERE})
    assert here.structured_content["state"] == "APPLIED"
    assert elsewhere.structured_content["state"] == "NOT_FOUND"  # shard a's ledger is never read for this merchant


async def test_a_shard_whose_redis_is_down_answers_retry_and_touches_no_other(
    sharded_env, errlog, rclient, second_redis: EmbeddedRedis
) -> None:
    second_redis.kill()
    async with stdio_client_for(sharded_env, errlog) as client:
        result = await client.call_tool("create_refund", {"payment_id": "pay_29QQoUBi66xm2f", "amount": 1000})
    body = error_of(result)
    assert body["caller_action"] == "RETRY_SAME_CALL"
    assert gates_queue_length(rclient, "a", "b") == 0  # never re-routed to another shard
