"""The slots a tool call takes before anything is done for it (ingress.admission), and the pools they size."""

from __future__ import annotations

import redis

from ingress.admission import AGENT_CALL_LIMIT, INGRESS_BUSY, money_slots, other_slots
from ingress.app import QUEUE_POOL_SIZE, ShardRoute
from interlock.config import load_settings
from tests.ingress.helpers import error_of


def test_an_agent_past_its_money_calls_is_refused_and_others_are_not() -> None:
    slots = money_slots(per_agent=2, total=5)
    assert slots.take("a") is None and slots.take("a") is None
    body = error_of(slots.take("a"))
    assert body["error"]["code"] == AGENT_CALL_LIMIT and body["caller_action"] == "RETRY_SAME_CALL"
    assert "INTERLOCK_AGENT_MAX_MONEY_CALLS=2" in body["error"]["message"]
    assert "not recorded" in body["error"]["message"]
    assert slots.take("b") is None  # another agent is not held up by a's calls
    slots.give_back("a")
    assert slots.take("a") is None  # an answered call gives its slot back
    assert slots.held == {"a": 2, "b": 1} and slots.in_use == 3


def test_past_the_total_every_agent_is_refused_as_ingress_busy_until_a_slot_is_given_back() -> None:
    slots = money_slots(per_agent=2, total=4)
    for agent in ("a", "a", "b", "b"):
        assert slots.take(agent) is None
    body = error_of(slots.take("c"))
    assert body["error"]["code"] == INGRESS_BUSY and "INTERLOCK_INGRESS_MAX_MONEY_CALLS=4" in body["error"]["message"]
    assert "c" not in slots.held  # a refusal takes nothing
    slots.give_back("b")
    assert slots.take("c") is None


def test_read_calls_are_capped_per_agent_only() -> None:
    slots = other_slots(per_agent=1)
    assert slots.take("a") is None and slots.take("b") is None
    body = error_of(slots.take("a"))
    assert body["error"]["code"] == AGENT_CALL_LIMIT and "INTERLOCK_AGENT_MAX_OTHER_CALLS=1" in body["error"]["message"]


def test_each_shards_wait_pool_holds_a_connection_for_every_wait_the_ingress_admits() -> None:
    # redis-py's default pool is 100, raising "Too many connections" past it: with more waits admitted than
    # that, an enqueued call was answered IN_PROGRESS at once although its outcome was published.
    settings = load_settings(ingress_max_money_calls=300, agent_max_money_calls=16)
    route = ShardRoute.connect("0", "redis://127.0.0.1:1/0", None, settings)  # nothing is connected yet
    try:
        for client, size in ((route.wait_redis, 300), (route.queue_redis, QUEUE_POOL_SIZE)):
            pool = client.connection_pool
            assert isinstance(pool, redis.BlockingConnectionPool)  # past its size a command waits, never fails
            assert pool.max_connections == size
    finally:
        route.close()
