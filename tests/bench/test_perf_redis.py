"""Redis commands per money call: the attribution rules on their own, and the count on a real stack held to the
bound it achieves (a count of commands is deterministic; a timing is not), so a change that adds round trips to the
hot path fails here."""

from __future__ import annotations

from pathlib import Path

from bench.perf_redis import BACKGROUND, BENCH_ONLY, Command, attribute, hop_of, measure_redis
from bench.perf_rig import PerfRig, run_agents

# What one sequential gated refund costs, every hop summed (the target is 20).
MAX_COMMANDS_PER_CALL = 17


def _c(client: str, *argv: str) -> Command:
    return Command(0.0, client, argv)


def test_a_transaction_is_charged_to_the_hop_of_the_commands_inside_it() -> None:
    owners = {"1": "ingress", "2": "rail"}
    commands = [_c("1", "MULTI"), _c("1", "HSET", "rq:job:proposal-ab", "status", "queued"),
                _c("1", "RPUSH", "rq:queue:gates", "proposal-ab"), _c("1", "EXEC"),
                _c("2", "MULTI"), _c("2", "LPUSH", "interlock:outcome:ab", "{}"),
                _c("2", "EXPIRE", "interlock:outcome:ab", "3600"), _c("2", "EXEC")]  # fmt: skip
    count = attribute(commands, owners, calls=1, seconds=1.0)
    assert count.hop_total("ingress: enqueue the Proposal") == 4
    assert count.hop_total("rail worker: publish the Outcome") == 4
    assert count.per_call == 8 and not count.background


def test_a_blocking_dequeue_counts_once_per_job_fetched_the_rest_is_idle_background() -> None:
    owners = {"3": "gate1"}
    commands = [_c("3", "BLMOVE", "rq:queue:gates", "rq:queue:gates:intermediate", "LEFT", "RIGHT", "1")] * 3
    commands += [_c("3", "HGETALL", "rq:job:proposal-ab"), _c("3", "HSET", "rq:worker:gate1", "state", "idle")]
    count = attribute(commands, owners, calls=1, seconds=2.0)
    assert count.hop_total("gate worker: dequeue") == 2
    assert sum(count.background.values()) == 3  # two idle dequeues and the worker's own state


def test_a_script_s_own_commands_are_charged_to_the_process_that_ran_it() -> None:
    owners = {"4": "rail"}
    commands = [_c("4", "EVALSHA", "abc", "2", "rq:queue:rail", "rq:queue:rail:intermediate", "31"),
                _c("lua", "LMOVE", "rq:queue:rail", "rq:queue:rail:intermediate", "LEFT", "RIGHT")]  # fmt: skip
    count = attribute(commands, owners, calls=1, seconds=1.0)
    assert count.hop_total("rail worker: prefetch (more jobs after a dequeue)") == 2


def test_the_bench_s_trace_list_is_not_charged_to_the_call() -> None:
    assert hop_of("ingress", _c("9", "LPUSH", "interlock:traces", "{}"), in_transaction=False) == BENCH_ONLY
    assert hop_of("rail", _c("9", "EXISTS", "rq:suspended"), in_transaction=False) == BACKGROUND


def test_rq_s_timed_maintenance_is_background_whenever_a_worker_runs_it() -> None:
    """A worker that starts late on a busy machine runs its first maintenance while the calls are counted."""
    for command in (_c("5", "SET", "rq:clean_groups", "1", "NX", "EX", "60"), _c("5", "SMEMBERS", "rq:groups"),
                    _c("5", "LRANGE", "rq:queue:gates:intermediate", "0", "-1")):  # fmt: skip
        assert hop_of("gate1", command, in_transaction=False) == BACKGROUND, command


def test_redis_commands_per_sequential_money_call_stay_within_the_bound(tmp_path: Path) -> None:
    rig = PerfRig(tmp_path, gate_workers=2).start()
    try:
        # Warm-up: the first call of each process imports and connects. Every gate worker has registered once the rig
        # has started; Redis hands a job to the longest-blocked BLMOVE, so sequential calls alternate between the
        # idle workers and each has made its one-off commands before the count (its maintenance is background).
        run_agents(rig, "gated", 1, 6)
        count = measure_redis(rig, 12)
    finally:
        rig.stop()
    # Every hop of the money path was seen, once per call where there is exactly one.
    assert count.hop_total("ingress: wait for the Outcome") == 12
    assert count.hop_total("gate worker: dequeue") >= 12 and count.hop_total("rail worker: dequeue") >= 12
    for hop in ("ingress: enqueue the Proposal", "gate worker: enqueue the Decision", "gate worker: job end",
                "rail worker: job end", "rail worker: publish the Outcome"):  # fmt: skip
        assert count.hop_total(hop) >= 12, (hop, count.hops)
    assert not [hop for hop in count.hops if hop.endswith(": other")], count.hops
    assert count.per_call <= MAX_COMMANDS_PER_CALL, (count.per_call, count.hops)
