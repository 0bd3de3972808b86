"""The task binding's wire format (SPEC §10, v2) and its verification: a forged, expired, re-signed-by-an-unlisted-key
or tampered task is refused with its own reason code, a v1 task (no audience) is refused with a message saying to
re-sign it as v2, and a harness in any language can produce a valid one."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.cli import cli
from interlock.task import (
    TASK_BAD_SIGNATURE,
    TASK_EXPIRED,
    TASK_MALFORMED,
    TASK_META_KEY,
    TASK_SIG_META_KEY,
    TASK_UNKNOWN_SIGNER,
    TASK_WRONG_AUDIENCE,
    TaskProblem,
    VerifiedTask,
    new_task,
    public_key_b64,
    sign_task,
    verify_task,
)

NOW = 1_800_000_000_000
KEY = Ed25519PrivateKey.generate()
SIGNERS = {"ticketing": public_key_b64(KEY)}


def task(**changes: Any) -> dict[str, Any]:
    base = new_task("ticket-4711", NOW + 3_600_000, "create_refund", merchant_id="acc_A", agent_ids=["agent_a"],
                    subjects=["pay_A1"], customer_id="cust_Asha", max_amount_minor=189900)  # fmt: skip
    return {**base, **changes}


def verify(meta: dict[str, Any], signers: dict[str, str] = SIGNERS, now: int = NOW) -> VerifiedTask | TaskProblem:
    return verify_task(meta.get(TASK_META_KEY), meta.get(TASK_SIG_META_KEY), signers, now)


def test_a_signed_task_verifies_and_carries_its_digest() -> None:
    verified = verify(sign_task(task(), KEY, "ticketing"))
    assert isinstance(verified, VerifiedTask)
    assert verified.task_id == "ticket-4711" and verified.signer == "ticketing"
    assert verified.digest == hashlib.sha256(rfc8785.dumps(task())).hexdigest()
    grant = verified.grant("create_refund")
    assert grant is not None and grant.subjects == ["pay_A1"] and grant.max_amount_minor == 189900
    assert (verified.audience.merchant_id, verified.audience.agent_ids) == ("acc_A", ["agent_a"])


def test_the_audience_names_the_merchant_and_agents_that_may_present_the_task() -> None:
    verified = verify(sign_task(task(), KEY, "ticketing"))
    assert isinstance(verified, VerifiedTask)
    assert verified.audience_problem("acc_A", "agent_a") is None
    for merchant, agent in (("acc_B", "agent_a"), ("acc_A", "agent_b"), ("acc_B", "agent_b")):
        problem = verified.audience_problem(merchant, agent)
        assert problem is not None and problem.reason_code == TASK_WRONG_AUDIENCE
        assert problem.detail["audience_merchant_id"] == "acc_A"


def test_a_v1_task_without_an_audience_is_refused_with_a_message_to_re_sign_it_as_v2() -> None:
    v1 = {k: v for k, v in task().items() if k != "audience"}
    # Signed exactly as a v1 harness does (the old context line), and as v2 bytes: refused either way.
    old = base64.b64encode(KEY.sign(b"interlock-task-v1\n" + rfc8785.dumps(v1))).decode()
    for meta in ({TASK_META_KEY: v1, TASK_SIG_META_KEY: {"signer": "ticketing", "sig": old}},
                 sign_task(v1, KEY, "ticketing"), sign_task({**v1, "audience": None}, KEY, "ticketing")):
        problem = verify(meta)
        assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_WRONG_AUDIENCE
        assert "re-sign it as v2" in problem.detail["error"]


@pytest.mark.parametrize("audience", [{"merchant_id": "acc_A"}, {"merchant_id": "acc_A", "agent_ids": []},
                                      {"merchant_id": ["acc_A", "acc_B"], "agent_ids": ["agent_a"]},
                                      {"merchant_id": "acc_A", "agent_ids": ["agent_a", "agent_a"]},
                                      {"merchant_id": "acc_A", "agent_ids": ["agent_a"], "shard": "s1"}])
def test_an_audience_names_exactly_one_merchant_and_at_least_one_distinct_agent(audience: dict[str, Any]) -> None:
    problem = verify(sign_task(task(audience=audience), KEY, "ticketing"))
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_MALFORMED, problem


def test_the_wire_format_is_what_spec_10_pins_so_any_language_can_sign() -> None:
    # A "foreign" harness: its own JSON text, keys in another order; only RFC 8785 and the context line matter.
    foreign = json.loads('{"grants": {"create_refund": {"max_amount_minor": 189900, "subjects": ["pay_A1"]}}, '
                         '"audience": {"agent_ids": ["agent_a"], "merchant_id": "acc_A"}, '
                         f'"expires_at": {NOW + 60_000}, "task_id": "t1"}}')  # fmt: skip
    message = b"interlock-task-v2\n" + rfc8785.dumps(foreign)
    sig = base64.b64encode(KEY.sign(message)).decode()
    raw = base64.b64encode(KEY.public_key().public_bytes(serialization.Encoding.Raw,
                                                         serialization.PublicFormat.Raw)).decode()  # fmt: skip
    verified = verify_task(foreign, {"signer": "ticketing", "sig": sig}, {"ticketing": raw}, NOW)
    assert isinstance(verified, VerifiedTask), verified


def test_a_forged_signature_is_refused() -> None:
    meta = sign_task(task(), KEY, "ticketing")
    meta[TASK_SIG_META_KEY]["sig"] = base64.b64encode(b"\x01" * 64).decode()
    assert verify(meta) == TaskProblem(TASK_BAD_SIGNATURE, {"signer": "ticketing",
                                                            "task_digest": verify_digest(meta)})  # fmt: skip


def verify_digest(meta: dict[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(meta[TASK_META_KEY])).hexdigest()


@pytest.mark.parametrize(
    ("path", "value"),
    [(("grants", "create_refund", "max_amount_minor"), 1_899_000),
     (("grants", "create_refund", "subjects"), ["pay_B2"]),
     (("expires_at",), NOW + 10 * 3_600_000), (("task_id",), "ticket-4712"),
     (("audience", "merchant_id"), "acc_B"), (("audience", "agent_ids"), ["agent_a", "agent_b"])],
)  # fmt: skip
def test_a_task_changed_after_signing_is_refused(path: tuple[str, ...], value: Any) -> None:
    meta = sign_task(task(), KEY, "ticketing")
    tampered = copy.deepcopy(meta)
    node = tampered[TASK_META_KEY]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    problem = verify(tampered)
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_BAD_SIGNATURE


def test_a_task_signed_by_a_key_the_mandate_does_not_list_is_refused() -> None:
    other = Ed25519PrivateKey.generate()
    # Re-signed under a listed signer id with an unlisted key: the signature does not verify.
    problem = verify(sign_task(task(), other, "ticketing"))
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_BAD_SIGNATURE
    # Signed under a signer id the mandate does not list at all.
    problem = verify(sign_task(task(), other, "attacker"))
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_UNKNOWN_SIGNER


def test_an_expired_task_is_refused() -> None:
    meta = sign_task(task(expires_at=NOW), KEY, "ticketing")
    problem = verify(meta, now=NOW)
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_EXPIRED
    assert isinstance(verify(meta, now=NOW - 1), VerifiedTask)


@pytest.mark.parametrize(
    ("raw_task", "raw_sig"),
    [("not an object", {"signer": "ticketing", "sig": "AA=="}), ({"task_id": "t"}, None),
     ({"task_id": "t"}, {"signer": "ticketing"}),
     ({"task_id": "t", "audience": {"merchant_id": "acc_A", "agent_ids": ["a"]}},
      {"signer": "ticketing", "sig": "!!"})],
)  # fmt: skip
def test_malformed_tasks_are_refused(raw_task: Any, raw_sig: Any) -> None:
    problem = verify_task(raw_task, raw_sig, SIGNERS, NOW)
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_MALFORMED


def test_a_validly_signed_task_with_unknown_fields_is_malformed() -> None:
    problem = verify(sign_task(task(scope="everything"), KEY, "ticketing"))
    assert isinstance(problem, TaskProblem) and problem.reason_code == TASK_MALFORMED


def test_interlock_task_sign_prints_a_meta_block_that_verifies(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["mandate", "keygen", "--out", str(tmp_path / "h")]).exit_code == 0
    signer = runner.invoke(cli, ["task", "signer", "--key", str(tmp_path / "h.key"), "--signer", "helpdesk"])
    public = signer.output.split('"')[1]
    result = runner.invoke(cli, ["task", "sign", "--key", str(tmp_path / "h.key"), "--merchant", "acc_A",
                                 "--agent", "agent_a", "--agent", "agent_b", "--tool", "create_refund",
                                 "--subject", "pay_X", "--customer", "cust_Y", "--max-amount", "189900",
                                 "--ttl", "1h", "--signer", "helpdesk"])  # fmt: skip
    assert result.exit_code == 0, result.output
    meta = json.loads(result.output)
    verified = verify(meta, {"helpdesk": public}, now=meta[TASK_META_KEY]["expires_at"] - 3_600_000)
    assert isinstance(verified, VerifiedTask), verified
    grant = verified.grant("create_refund")
    assert grant is not None and (grant.subjects, grant.customer_id) == (["pay_X"], "cust_Y")
    assert verified.audience.model_dump() == {"merchant_id": "acc_A", "agent_ids": ["agent_a", "agent_b"]}


def test_interlock_task_sign_needs_the_audience(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["mandate", "keygen", "--out", str(tmp_path / "h")]).exit_code == 0
    result = runner.invoke(cli, ["task", "sign", "--key", str(tmp_path / "h.key"), "--tool", "create_refund"])
    assert result.exit_code != 0 and "--merchant" in result.output
