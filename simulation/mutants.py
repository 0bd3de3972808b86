"""Proof that the simulator can fail: each money-path defect the reviews found, re-introduced into a copy of the
tree (chaos.mutants.build), and the seeds it takes the simulator to find it.

A mutant is caught when some seed of its run ends with a violation; the report names the first such seed and
the violation. The invariant mutants of chaos/mutants.py are run here too, unchanged, so that one list says
which guarantees each tool can see broken.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.mutants import MUTANTS as INVARIANT_MUTANTS
from chaos.mutants import ROOT, Edit, Mutant, build, env_for

SEEDS = 120  # a mutant not found within this many seeds is reported as not found


def _m(name: str, breaks: str, *edits: Edit) -> Mutant:
    return Mutant(name, breaks, tuple(edits))


# The reconcile delay judged by wall-clock times alone (before ADR 0023): part of two mutants.
WAIT_ON_WALL_CLOCK_ONLY = Edit("reconciler/loop.py", "            if ready_at <= now and waited:",
                               "            if ready_at <= now:")

SEAM_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("terms_not_checked", "issue 25 item 7: APPLIED only on the intent's own terms",
       Edit("rail_worker/classify.py", "    differs = intent.mismatch(entity.raw) if intent is not None else None",
            "    differs = None")),
    _m("send_window_open_after_pause", "ADR 0005: no request leaves once its worker's or its row's lease may be gone",
       Edit("rail_worker/execute.py", "    if rt.send_stop.is_set() or late_ms >= 0:", "    if False:"),
       Edit("rail_worker/execute.py",
            "        with send_window(send_by, wall_until_ms=wall_until, wall_clock=now_ms, lost=rt.send_stop):",
            "        if True:")),
    _m("reconcile_without_delay", "ADR 0010: a settlement is read only after its call's deadline plus the delay",
       Edit("reconciler/loop.py", "            ready_at = gave_up + self.settings.reconcile_min_delay_ms",
            "            ready_at = row[\"started_at\"] or 0"),
       WAIT_ON_WALL_CLOCK_ONLY),
    _m("stale_due_list", "ADR 0023: a reconcile pass acts only on the attempt its sweep judged due",
       Edit("reconciler/loop.py", "            if attempt_seq is not None and intent.attempt_seq != attempt_seq:",
            "            if False:")),
    _m("reconcile_delay_on_wall_clock_only", "ADR 0023: the reconcile delay also passes on the reconciler's own clock",
       WAIT_ON_WALL_CLOCK_ONLY),
    _m("admission_skips_limits", "SPEC §7 G3: the rail worker re-asserts the limits inside the admit transaction",
       Edit("rail_worker/admit.py", "        if limits.verdict is Verdict.BLOCK:\n", "        if False:\n")),
    _m("grace_lands_nowhere", "issue 25 item 1: a repeat across the window boundary lands on the first call's intent",
       Edit("rail_worker/grace.py", "    for sik in decision.grace_siks:\n        intent = intents.get_intent(",
            "    return None\n    for sik in decision.grace_siks:\n        intent = intents.get_intent(")),
    _m("unrecorded_answer_dropped", "issue 25 item 2: a rail answer whose write failed is retried until durable",
       Edit("rail_worker/execute.py", "            clock.sleep(pause)\n", "            raise\n")),
    _m("fenced_answer_not_evidence", "ADR 0005: a superseded worker's stamped answer settles the intent",
       Edit("rail_worker/execute.py",
            "        if result.event in (Event.RAIL_APPLIED, Event.TERMS_MISMATCH):\n            # Ours on other terms",
            "        if False:\n            # Ours on other terms")),
    _m("boot_takes_live_rows", "SPEC §8: boot leaves an IN_FLIGHT row alone while its call may still be out",
       Edit("rail_worker/lease.py", "            if intent.state is not State.IN_FLIGHT or now < until:",
            "            if intent.state is not State.IN_FLIGHT:")),
    _m("abandon_at_lease_expiry", "ADR 0005: an IN_FLIGHT row is abandoned only after its lease plus the deadline",
       Edit("reconciler/loop.py", "                        if now < until:\n                            continue\n"
            "                        event = Event.LEASE_EXPIRED",
            "                        event = Event.LEASE_EXPIRED")),
    _m("now_before_lock", "issue 13 item 3: the IN_FLIGHT transaction reads `now` only once it holds the write lock",
       Edit("rail_worker/execute.py",
            "    begun = rt.write(lambda conn: _begin(rt, conn, merchant_id, sik, request_id=request_id))",
            "    early = now_ms()\n"
            "    begun = rt.write(lambda conn: _begin(rt, conn, merchant_id, sik, request_id=request_id,\n"
            "                                         early=early))"),
       Edit("rail_worker/execute.py",
            "           request_id: str | None) -> Started | Outcome | None:  # fmt: skip\n    now = now_ms()",
            "           request_id: str | None, early: int = 0) -> Started | Outcome | None:\n    now = early")),
    _m("retry_refusal_trusted", "issue 13 item 6: a definitive 4xx on attempt 2 or later is settled by stamp, not "
       "trusted", Edit("rail_worker/classify.py", "        if attempt_seq > 1:\n", "        if False:\n")),
    _m("claim_by_repeat", "ADR 0011 (repro claim_by_repeat.py): the claim belongs to the call that executes",
       # The executing call does not take over the claim: a repeat admitted while it is out finds no one to wait
       # for and is answered at once with IN_FLIGHT, as when the first thread to reach the claim kept it.
       Edit("rail_worker/dispatch.py", "                self._calls.setdefault(executes, _Claim()).executing += 1",
            "                self._calls.setdefault(executes, _Claim())"),
       Edit("rail_worker/dispatch.py", "            claim = self._calls[key]\n            claim.executing -= 1",
            "            claim = self._calls.setdefault(key, _Claim())\n"
            "            claim.executing = max(claim.executing - 1, 0)")),
    _m("shard_fence_off", "issue 25 item 3: admission refuses a merchant the ledger's accepted map gives another shard",
       Edit("rail_worker/ownership.py",
            "        return None if accepted.ownership.shard_of(merchant_id) == self.shard else SHARD_NOT_OWNER",
            "        return None")),
    _m("move_leaves_intents_behind", "issue 25 item 3: a merchant with intents in its shard's ledger does not move",
       Edit("ops/shards_cli.py", "        states = found.get(source, {}).get(merchant, {})",
            "        states: dict[str, int] = {}"),
       Edit("ops/shard_apply.py",
            "        states = ownership.intents_by_state(conn, merchant) if conn is not None else {}",
            "        states: dict[str, int] = {}")),
)}  # fmt: skip

# Defects the workload's extras reach (simulation.workload): holds decided by the operator, signed tasks, a mandate
# naming another rail account, a mandate replaced mid-run.
WORKLOAD_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("reauthorize_without_reassert",
       "issue 13 item 5: HOLD_RELEASED / RETRY_AUTHORIZED re-assert G1, G2's range and G3 in their own transaction",
       Edit("ledger/limits.py", "first admitted under (issue 13, item 5).\"\"\"\n",
            "first admitted under (issue 13, item 5).\"\"\"\n    return allow(\"REASSERTED\")\n")),
    _m("task_audience_unchecked", "issue 25 item 5: a task is presented only by the merchant and agents it names",
       Edit("gate_workers/task_binding.py",
            "wrong = checked.audience_problem(proposal.merchant_id, proposal.agent_id)", "wrong = None"),
       Edit("rail_worker/admit.py", "    wrong = _task_audience_problem(decision)\n", "    wrong = None\n")),
    _m("rail_account_unchecked", "issue 25 item 8: money moves only on the rail account the mandate names",
       Edit("interlock/rail_account.py", "    if named != configured:", "    if False:")),
    _m("admit_skips_g1", "issue 13 item 9: admission and the send re-check G1 (a replaced or narrowed mandate)",
       Edit("rail_worker/admit.py", "    elif rt.mandates.hash_of(decision.agent_id) != decision.mandate_hash:",
            "    elif False:"),
       Edit("rail_worker/admit.py", "    elif not mandate.is_active(now) or mandate.grant(decision.tool) is None:",
            "    elif False:"),
       Edit("rail_worker/execute.py", "    withdrawn = _mandate_withdrawn(rt, conn, intent, now)",
            "    withdrawn = None")),
)}  # fmt: skip

# Defects on the payout path (ADR 0028), which the workload's payouts reach (simulation.payouts).
PAYOUT_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("unlisted_payee_not_held", "ADR 0034: a payout to a payee on no list waits for a person when the grant "
       "holds unlisted payees",
       Edit("gate_workers/payout_value.py", "    if not listed:\n        return hold(PAYEE_UNLISTED_HELD,",
            "    if False:\n        return hold(PAYEE_UNLISTED_HELD,")),
    _m("free_text_unchecked", "ADR 0035: a payout's narration and notes stay within its grant's free_text",
       Edit("gate_workers/free_text.py",
            "    if rule is None:\n        return None\n    texts = texts_of(action.params)",
            "    if True:\n        return None\n    texts = texts_of(action.params)")),
    _m("agent_notes_one_too_many", "SPEC §10: an agent's own notes leave room for the three keys Interlock writes",
       Edit("interlock/notes.py", "AGENT_MAX_NOTES = RAIL_MAX_NOTES - len(RESERVED_NOTE_KEYS)",
            "AGENT_MAX_NOTES = RAIL_MAX_NOTES - len(RESERVED_NOTE_KEYS) + 1")),
    _m("reserved_note_key_accepted", "SPEC §10: an agent may not write a key Interlock writes (the stamp, the owner)",
       Edit("interlock/arguments.py", "        if key in RESERVED_NOTE_KEYS:\n", "        if False:\n")),
    _m("note_value_unbounded", "SPEC §10: a note's value is at most 256 characters, refused at the ingress",
       Edit("interlock/arguments.py", "        if len(item) > MAX_NOTE_CHARS:\n", "        if False:\n")),
    _m("account_merchants_per_merchant", "finding F-acct-1: the merchants sharing a rail account are remembered per "
       "merchant and account named, not per merchant",
       Edit("interlock/mandate_load.py",
            "        key = (mandate.merchant_id, effective_account(mandate, self.rail_account_id))",
            "        key = (mandate.merchant_id, None)")),
    _m("payee_not_checked", "ADR 0028: a payout goes only to a payee the mandate names, as the rail knows it",
       Edit("interlock/mandate_model.py",
            "        return fund_account_id in self.fund_account_ids or contact_id in self.contact_ids",
            "        return True")),
    # The whole re-check answers "ok" (the review's defect). Dropping only its first comparison changes nothing the
    # checker can see: the stale-read comparison after it counts the same money and more, and refuses all the same
    # (G2_STALE_RAIL_READ instead of G2_EXCEEDS_PAYOUT_BALANCE; tests/rail_worker/test_payout_balance_at_admission.py
    # holds the reason).
    _m("payout_balance_recheck_ok", "ADR 0028: the admission re-asserts amount + fee against the balance less what "
       "is in motion, under the write lock",
       Edit("rail_worker/admit.py", "    if decision.tool == PAYOUT_TOOL:\n        # One balance for every payee",
            "    if decision.tool == PAYOUT_TOOL:\n        return None\n        # One balance for every payee")),
    _m("payout_key_per_attempt", "SPEC §18: every attempt of one payout sends the same X-Payout-Idempotency key",
       Edit("rail_worker/execute.py",
            "            \"idempotency_key\": intent.sik if refusals == 0 else f\"{intent.sik}-{refusals}\",",
            "            \"idempotency_key\": f\"{intent.sik}-{intent.attempt_seq}\",")),
    _m("payout_queued_whatever_the_mandate", "ADR 0028: queue_if_low_balance is the mandate's, never assumed",
       Edit("rail_worker/execute.py",
            "\"queue_if_low_balance\": params.get(\"queue_if_low_balance\") is True,",
            "\"queue_if_low_balance\": True,")),
    _m("withdrawal_off", "ADR 0028: a replaced mandate's queued payouts are cancelled on the rail",
       Edit("reconciler/withdrawal.py", "        now = self.clock()\n        due: list[",
            "        return 0\n        now = self.clock()\n        due: list[")),
    _m("payout_failure_not_raised", "ADR 0028 amendment: a payout the bank failed or reversed is raised to a person",
       Edit("ledger/lifecycle.py", "_PAYOUT_ATTENTIONS = {\"failed\": PAYOUT_FAILED, \"reversed\": PAYOUT_REVERSED,",
            "_PAYOUT_ATTENTIONS = {\"failed\": None, \"reversed\": None,")),
)}  # fmt: skip

# Defects on the webhook path and the lifecycle after APPLIED (ADR 0027, docs/webhooks.md), which the seeds with
# webhooks and the bank's lifecycle reach (simulation.webhooks; workload part lifecycle).
WEBHOOK_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("webhook_signature_unchecked", "SPEC §17: a delivery is stored only when X-Razorpay-Signature verifies",
       Edit("webhooks/signature.py", "    if not signature:\n        return False", "    return True")),
    _m("webhook_account_unchecked", "ADR 0027: an event is evidence only where it names the intent's rail account",
       Edit("reconciler/inbox.py", "        if expected is not None and delivered.account_id != expected:",
            "        if False:")),
    _m("sighting_terms_unchecked", "ADR 0016: a sighting settles an intent APPLIED only on the intent's terms",
       Edit("ledger/intents.py", " else ():\n        differs = intent.mismatch(sighting.entity)",
            " else ():\n        differs = None")),
    _m("refund_failure_not_raised", "issue 27: a refund the bank failed is raised to a person (REFUND_FAILED)",
       Edit("ledger/lifecycle.py", "    if tool == REFUND_TOOL and status == \"failed\":\n        return REFUND_FAILED",
            "    if False:\n        return REFUND_FAILED")),
    _m("settlement_reversal_not_raised", "issue 27: a settlement the bank reversed is raised (SETTLEMENT_REVERSED)",
       Edit("ledger/lifecycle.py", "    if tool == SETTLEMENT_TOOL and (status == \"reversed\" or",
            "    if False and (status == \"reversed\" or")),
)}  # fmt: skip

# A list read that concludes absence before its end (ADR 0004), which the seeds with others' traffic on the account
# reach (simulation.crowd: an entity of ours behind a page of newer ones).
LIST_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("absence_on_page_one", "ADR 0004: absence is concluded only from a list paged to its end",
       Edit("rails/pager.py",
            "            if page.exhausted:\n                return PageResult(None, pages, exhausted=True,",
            "            if True:\n                return PageResult(None, pages, exhausted=True,")),
)}  # fmt: skip

# Rules that compare one process's timestamps with another's, back on one clock (ADR 0032): each holds only while
# every process reads the same wall clock, and each is found with every process on its own (the skew focus).
SKEW_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("applied_since_by_clock", "F6 and F9, ADR 0032: money applied since the gate's read is counted by commit "
       "order (the gate's mark), not by comparing the gate's clock with the recorder's",
       Edit("rail_worker/admit.py", "    mark = decision.applied_mark\n", "    mark = None\n"),
       Edit("rail_worker/admit.py", "    since = (decision.rail_read_at_ms or 0) - skew_ms\n",
            "    since = decision.rail_read_at_ms or 0\n")),
    _m("abandon_on_one_clock", "F7, ADR 0032: an attempt is abandoned only once the caller's clock is past its lease "
       "plus the deadline plus the skew",
       Edit("ledger/intents.py", "    return lease_until + call_deadline_ms + clock_skew_ms\n",
            "    return lease_until + call_deadline_ms\n")),
    _m("unsettled_at_on_one_clock", "F8, ADR 0009 amended: a repeat past the grace lands on a first admitted or "
       "settled up to the skew before its ingress's clock says it was received",
       Edit("ledger/states.py", "    since = at_ms - clock_skew_ms\n", "    since = at_ms\n")),
    _m("withdrawal_refusal_for_life", "F10: a withdrawn payout the rail would not cancel in one status is tried again "
       "once it moves to another (pending, approved into queued)",
       Edit("reconciler/withdrawal.py", "(merchant_id, sik, reason, status) in self._refused or waiting:",
            "any(r[:3] == (merchant_id, sik, reason) for r in self._refused) or waiting:")),
    _m("payout_balance_read_first", "F11, ADR 0028 amended: a payout's G2 reads the undebited payouts before the "
       "balance, so one debited between the two reads is in one of them",
       Edit("rails/pager.py", "    waiting: dict[str, int] = {}\n    for status in NOT_DEBITED:",
            "    banking = rail.fetch_banking_balance(account_number)\n    waiting: dict[str, int] = {}\n"
            "    for status in NOT_DEBITED:"),
       Edit("rails/pager.py", "    return rail.fetch_banking_balance(account_number), sum(waiting.values())",
            "    return banking, sum(waiting.values())")),
    _m("quarantined_not_in_motion", "F12: G2 counts a QUARANTINED intent's money as in motion until a person "
       "resolves it",
       Edit("ledger/queries.py", "_G2_COUNTED: frozenset[State] = MAY_MOVE_MONEY | {State.HELD, State.QUARANTINED}",
            "_G2_COUNTED: frozenset[State] = MAY_MOVE_MONEY | {State.HELD}")),
)}  # fmt: skip

# Defects no ordering of this deployment can reach, because another layer of the real code stands in front of them
# in every run: each is covered by the test named, and docs/simulation.md gives the whole argument.
EQUIVALENT: dict[str, str] = {
    "I1_one_intent_per_sik": "the one caller of insert_intent, the admission, reads the row under the write lock "
                             "first, so the ON CONFLICT clause never runs (tests/ledger inserts a SIK twice)",
    "fenced_answer_not_evidence": "the answer is still kept on its attempt row, and the reconciler's pass and the "
                                  "next attempt's transaction settle the intent from it (tests/engine/"
                                  "test_send_side_fences.py)",
    "payout_key_per_attempt": "a payout is read by the reconciler only after its call's deadline plus the delay (it "
                              "is not read early as a keyed refund is), when a rail inside ADR 0010's bound lists it, "
                              "so no retry follows a payout that was applied: the key guards only past that bound "
                              "(tests/engine/test_payouts.py, test_a_payout_never_applied_is_retried_under_the_same_"
                              "key, holds the rule; 200 seeds of focus payouts, ambiguous_retries, refund_list_late "
                              "found nothing)",
    "claim_by_repeat": "a repeat made during its call is answered IN_FLIGHT at once instead of with the outcome: "
                       "true, and the agent repeats; nothing the checker judges from outside changes "
                       "(tests/rail_worker/test_dispatch_claims.py)",
}

# Defects of the restore after a machine loss (ADR 0029; simulation.machine_loss), searched with a loss in every seed.
LOSS_MUTANTS: dict[str, Mutant] = {m.name: m for m in (
    _m("restore_reads_early", "ADR 0029 point 5 (repro restore_reads_before_lost_send_lands.py): the final read "
       "waits the call deadline plus the delay from the restore's start",
       Edit("ops/restore.py", "    final_read_at = fenced_at + deadline_s + reread_after_s",
            "    final_read_at = fenced_at + reread_after_s")),
    _m("restore_executes_what_was_in_motion", "ADR 0029 point 2: what the replica shows AUTHORIZED or IN_FLIGHT "
       "becomes UNKNOWN, never executed",
       Edit("ops/restore.py", "    report.made_unknown = _unsettle(conn, now, actor)",
            "    report.made_unknown = 0")),
    _m("restore_leaves_moved_on_intents", "ADR 0029 point 3: a held, refused or confirmed-absent intent the lost tail "
       "sent is settled by its entity",
       Edit("ops/restore.py",
            "MOVED_ON = frozenset({State.HELD, State.CONFIRMED_NOT_APPLIED, State.FAILED_TERMINAL})",
            "MOVED_ON: frozenset[State] = frozenset()")),
    _m("restore_owners_by_grant", "finding F-loss-1: an entity of the lost tail is recovered under the agent it "
       "names, whatever its mandate grants now",
       Edit("ops/restore.py",
            "        mine = [o for o in everyone.get(ANYONE, []) if (o.merchant_id, o.agent_id) == named]",
            "        mine = [o for o in owners if (o.merchant_id, o.agent_id) == named]"),
       Edit("ops/restore.py",
            "    accounts = sorted({m.rail.account_number for m in mandates if m.rail.account_number})",
            "    accounts = sorted({m.rail.account_number for m in mandates\n"
            "                       if m.grant(PAYOUT_TOOL) is not None and m.rail.account_number})")),
    _m("restore_refunds_read_twice", "finding F-loss-2: refunds, which may be listed a delay late, are read once "
       "more a delay after the final read",
       Edit("ops/restore.py", "    for reading in range(3):", "    for reading in range(2):")),
    _m("restore_payouts_read_twice", "finding F-loss-4: payouts, which may be listed a delay late as refunds are, "
       "are read with them once more a delay after the final read",
       Edit("ops/restore.py", "LISTED_LATE = (REFUND_TOOL, PAYOUT_TOOL)", "LISTED_LATE = (REFUND_TOOL,)")),
    _m("redelivery_answered_from_copy", "finding F-loss-5: a request admission already decided is answered from "
       "what was recorded for it, not from a second judgement of it",
       Edit("rail_worker/admit.py", "    sik = recorded.sik\n", "    sik = decision.sik\n"),
       Edit("rail_worker/admit.py", "    if recorded.verdict == Verdict.BLOCK.value:", "    if True:")),
    _m("task_ceiling_ignores_recovered", "finding F-loss-3: an intent recovered from the rail counts against the "
       "task ceilings of its merchant and agent",
       Edit("ledger/queries.py", "    if recovered_for is not None and recovered_for[1]:", "    if False:")),
)}  # fmt: skip

# `--only` runs any of them
EVERY: dict[str, Mutant] = {**INVARIANT_MUTANTS, **SEAM_MUTANTS, **WORKLOAD_MUTANTS, **PAYOUT_MUTANTS,
                             **WEBHOOK_MUTANTS, **LIST_MUTANTS, **LOSS_MUTANTS,
                             **SKEW_MUTANTS}
ALL: dict[str, Mutant] = {name: m for name, m in EVERY.items() if name not in EQUIVALENT}


@dataclass(frozen=True)
class Search:
    """How hard to look for one mutant: its seed budget, and the ingredients every seed of it gets (run_seed's
    focus: fault kinds on whatever the seed drew, or two reconcilers per shard)."""

    seeds: int = 0  # 0: SEEDS
    focus: frozenset[str] = frozenset()
    # The violations that show this mutant's broken guarantee (empty: any). A search whose ingredients also reach an
    # open finding (docs/simulation.md) counts only the seeds that break this one.
    kinds: frozenset[str] = frozenset()
    # Workload parts (simulation.workload PARTS) this search turns off: a part drawn in some seeds changes them, and
    # the rarest orderings are found in seeds it would change.
    disabled: frozenset[str] = frozenset()


LOSS = frozenset({"machine_loss"})

# Defects that need a rare combination: the search is aimed at their ingredients, as a person who knew the defect
# would aim a test at it, and the report says so.
SEARCHES: dict[str, Search] = {
    # a rail worker stopped between its IN_FLIGHT commit and the first byte, long enough for its lease to go
    "send_window_open_after_pause": Search(400, frozenset({"pause"})),
    # a wall clock stepped forward between a settlement's call and the reconciler's read of a lagging list
    "reconcile_delay_on_wall_clock_only": Search(400, frozenset({"clock_step", "list_lag", "rail_money"})),
    # a refund applied with its answer lost, listed late, and its retry refused with a 4xx
    "retry_refusal_trusted": Search(400, frozenset({"ambiguous_retries", "refund_list_late", "key_expiry"})),
    # two reconcilers, one acting on a due list that went stale behind the other's retry: a first attempt read
    # absent, its retry applied with the answer lost, still unlisted when the stale pass reads
    # (found at seed 174 at b60c04a, at 718 at 18e82e6 and at 1413 at 402f599: the seeds move with the workload parts)
    "stale_due_list": Search(1500, frozenset({"ambiguous_retries", "list_lag", "two_reconcilers",
                                             "reconciler_pause"})),
    # a hold released after the window filled up behind it, or a retry authorized under a narrower mandate
    "reauthorize_without_reassert": Search(200, frozenset({"holds", "replace"})),
    # a merchant moved between shards while its calls are on their way (simulation.shard_move)
    "shard_fence_off": Search(200, frozenset({"move"})),
    "move_leaves_intents_behind": Search(200, frozenset({"move"})),
    # the payout path: payouts in every seed, not six in ten
    "payee_not_checked": Search(120, frozenset({"payouts"})),
    # ... judged by the gates while the rail workers are stopped (an outage, from the start in half the seeds), so
    # both racing payouts' Decisions wait to be admitted against the same ledger
    "payout_balance_recheck_ok": Search(200, frozenset({"payout_race", "rail_outage"}), frozenset({"PAYOUT_BALANCE"})),
    "payout_queued_whatever_the_mandate": Search(120, frozenset({"payouts"})),
    # payout grants bounding free text, and agents sending narrations past the bound, in every seed
    "free_text_unchecked": Search(120, frozenset({"free_text"})),
    # agents' own notes in every seed, some past what the rail leaves them
    "agent_notes_one_too_many": Search(60, frozenset({"notes"}), frozenset({"NOTES"})),
    "reserved_note_key_accepted": Search(60, frozenset({"notes"}), frozenset({"NOTES"})),
    "note_value_unbounded": Search(60, frozenset({"notes"}), frozenset({"NOTES"})),
    # payout grants holding unlisted payees for a person, payouts to one, in every seed
    "unlisted_payee_not_held": Search(120, frozenset({"payee_hold"}), frozenset({"PAYEE"})),
    # mandates naming rail accounts, a stray one for the other shard's account, payouts near the balance
    "account_merchants_per_merchant": Search(300, frozenset({"account", "payouts", "payout_race"}),
                                             frozenset({"PAYOUT_BALANCE"})),
    "payout_failure_not_raised": Search(120, frozenset({"payouts"})),
    # webhooks in every seed, forged ones among them; the bank's lifecycle in every seed
    "webhook_signature_unchecked": Search(120, frozenset({"webhooks"})),
    "webhook_account_unchecked": Search(200, frozenset({"webhooks", "account"})),
    "sighting_terms_unchecked": Search(200, frozenset({"webhooks", "rail_money"})),
    "refund_failure_not_raised": Search(120, frozenset({"lifecycle"})),
    "settlement_reversal_not_raised": Search(120, frozenset({"lifecycle"})),
    # an entity of ours behind a page of others' newer ones, read when its answer was lost
    "absence_on_page_one": Search(200, frozenset({"crowd_burst", "ambiguous_retries"})),
    # a payout queued for want of balance when its agent's mandate is replaced
    "withdrawal_off": Search(300, frozenset({"payouts", "replace"})),
    # a shard's machine lost, and the shard restored from its replica (simulation.machine_loss)
    "restore_reads_early": Search(200, LOSS),
    # found at seed 66 at b60c04a, and at 482 at 18e82e6 (its 200-seed budget missed it once the seeds moved)
    "restore_executes_what_was_in_motion": Search(500, LOSS),
    "restore_leaves_moved_on_intents": Search(200, LOSS),
    "restore_owners_by_grant": Search(200, LOSS),
    "restore_refunds_read_twice": Search(200, LOSS),
    # signed tasks in every seed: a task's calls paid by the lost tail, its ceiling counted after the restore
    "task_ceiling_ignores_recovered": Search(200, LOSS | {"tasks"}, frozenset({"TASK_CEILING"})),
    # proposals delivered twice and judged twice, the second judgement's rail read failing; agents asking again. The
    # notes part off: it moved seed 106, which found it at cda180a, and 800 seeds with it found nothing at 402f599
    "redelivery_answered_from_copy": Search(300, LOSS | {"queue", "rail_read_error"},
                                            frozenset({"RESTORE_CONTRADICTED"}), frozenset({"notes"})),
    # a payout on the wire when the machine is lost, listed past ADR 0010's bound (the refund-list-late fault)
    "restore_payouts_read_twice": Search(200, LOSS | {"payouts", "refund_list_late"},
                                         frozenset({"LEDGER_RAIL", "ONE_ENTITY_PER_ACTION"})),
    # every process on its own clock, and steps of the clocks: a gate's read stamped ahead of the payouts recorded
    # after it; concurrent payouts near the balance
    "applied_since_by_clock": Search(400, frozenset({"skew", "clock_step", "payout_race"}),
                                     frozenset({"PAYOUT_BALANCE"})),
    # every process on its own clock: a standby or reconciler ahead of the worker whose row lease it reads
    "abandon_on_one_clock": Search(120, frozenset({"skew"}), frozenset({"ABANDONED_EARLY"})),
    # every process on its own clock, no grace, a start seconds before midnight and the rail workers stopped from the
    # start: a repeat received as its queued first call is admitted and settled, stamped by clocks either side
    "unsettled_at_on_one_clock": Search(200, frozenset({"skew", "short_grace", "rail_outage"}),
                                        frozenset({"ONE_ENTITY_PER_ACTION"})),
    # a payout pending a person's approval when its mandate is replaced, approved into the queue afterwards
    "withdrawal_refusal_for_life": Search(300, frozenset({"payout_approval", "replace"}), frozenset({"WITHDRAWN"})),
    # payouts racing one balance while the rail's answers fail and the bank moves them on between reads
    "payout_balance_read_first": Search(200, frozenset({"payout_race", "rail_outage"}),
                                        frozenset({"PAYOUT_BALANCE"})),
    # one racing payout found on the rail stamped on other terms (quarantined) before the next is admitted
    # found at seed 21 at b60c04a, and at 295 at 18e82e6 (its 200-seed budget missed it once the seeds moved)
    "quarantined_not_in_motion": Search(300, frozenset({"payout_race", "rail_outage"}),
                                        frozenset({"PAYOUT_BALANCE"})),
}


@dataclass
class Found:
    mutant: str
    found: bool
    seed: int | None
    violation: str
    seconds: float


def find(mutant: Mutant, base: Path, *, seeds: int | None = None) -> Found:
    """Run the simulator on the mutated tree, seed by seed, until one fails (or the budget has passed).

    A seed has shown the mutant's broken guarantee only if the unmutated tree passes that very seed: an aimed
    search's seeds are busier than the rest, and the unmutated tree can run out of steps on them as well (STEP_BUDGET,
    the liveness property judged by the step budget), or break on them for a reason of its own (an open finding). So
    a failing seed is run again on this tree, and counts as finding the mutant only when it passes here."""
    search = SEARCHES.get(mutant.name, Search())
    seeds = seeds or search.seeds or SEEDS
    tree = build(mutant, base)
    focus, kinds, off = sorted(search.focus), sorted(search.kinds), sorted(search.disabled)
    started, first = time.monotonic(), 1
    while first <= seeds:
        seed, violation = _first_failing(tree, range(first, seeds + 1), focus, kinds, off)
        if seed is None:
            return Found(mutant.name, False, None, violation, round(time.monotonic() - started, 1))
        unmutated, _ = _first_failing(ROOT, range(seed, seed + 1), focus, kinds, off)
        if unmutated is None:
            settles = " (the unmutated tree settles this seed)" if violation.startswith("STEP_BUDGET") else ""
            return Found(mutant.name, True, seed, violation + settles, round(time.monotonic() - started, 1))
        first = seed + 1  # the unmutated tree fails it too: it shows nothing about the mutant
    return Found(mutant.name, False, None, f"not found in {seeds} seeds", round(time.monotonic() - started, 1))


def _first_failing(tree: Path, seeds: range, focus: list[str], kinds: list[str] | None = None,
                   disabled: list[str] | None = None) -> tuple[int | None, str]:  # fmt: skip
    """The first of *seeds* whose run on *tree* has a violation (of *kinds*, when given), with it (STEP_BUDGET only
    when nothing else broke in that seed); or (None, why none was found)."""
    kinds = kinds or []
    script = ("import sys\nfrom simulation.run import quiet_logs, run_seed\nquiet_logs()\n"
              f"for seed in range({seeds.start}, {seeds.stop}):\n"
              f"    r = run_seed(seed, focus=frozenset({focus!r}), disabled=frozenset({disabled or []!r}))\n"
              f"    shown = [v for v in r.violations if not {kinds!r} or v.kind in {kinds!r}]\n"
              "    broken = [v for v in shown if v.kind != 'STEP_BUDGET'] or shown\n"
              "    if broken:\n        print(seed, broken[0]); sys.exit(1)\nprint('none')\n")  # fmt: skip
    env = {**env_for(tree), "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=3600)  # fmt: skip
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 1 and last and last.split()[0].isdigit():
        seed, _, violation = last.partition(" ")
        return int(seed), violation
    # An uncaught exception exits 1 as well (a copy that does not import, a crash in a seed): its last line says
    # why, so a run that never ran is not read as one that found nothing.
    error = proc.stderr.strip().splitlines()[-1:] if proc.returncode != 0 else []
    return None, f"not found in {len(seeds)} seeds {' '.join(error)}".strip()


def summarise(results: list[Found]) -> str:
    lines = ["| mutant | breaks | search | found by seed | violation | seconds |", "|---|---|---|---|---|---|"]
    for r in results:
        m, search = EVERY[r.mutant], SEARCHES.get(r.mutant, Search())
        aim = f"{search.seeds or SEEDS} seeds" + (f", focus {', '.join(sorted(search.focus))}" if search.focus else "")
        aim += f", counting {', '.join(sorted(search.kinds))}" if search.kinds else ""
        aim += f", without {', '.join(sorted(search.disabled))}" if search.disabled else ""
        lines.append(f"| `{r.mutant}` | {m.breaks} | {aim} | {r.seed if r.found else '—'} | {r.violation[:140]} | "
                     f"{r.seconds} |")  # fmt: skip
    found = sum(r.found for r in results)
    lines += ["", "Not run, because no ordering here can reach them (each is covered by the test named):", ""]
    lines += [f"* `{name}`: {why}" for name, why in EQUIVALENT.items()]
    lines += ["", f"simulation mutants: {found}/{len(results)} found"]
    return "\n".join(lines)
