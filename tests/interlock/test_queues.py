"""Queue names (SPEC §15): every queue a shard's actors consume carries the shard, so no shard's worker can take
another shard's work even on one Redis; a deployment without a map keeps today's names."""

from __future__ import annotations

from interlock.queues import gates_queue, rail_queue, reconcile_hint_key, shard_queues


def test_every_queue_of_a_named_shard_carries_its_name_and_the_default_shard_keeps_the_bare_names() -> None:
    assert shard_queues("s0") == ("gates:s0", "rail:s0")
    assert set(shard_queues("s0")).isdisjoint(shard_queues("s1"))
    assert reconcile_hint_key("s0") != reconcile_hint_key("s1")
    assert (gates_queue(), rail_queue()) == ("gates", "rail")
    assert shard_queues() == ("gates", "rail")
