"""The workload's RazorpayX payouts (ADR 0028): payees the mandates name and one they do not, a payee with two
fund accounts, and a business account whose balance cannot pay for everything asked of it.

Per shard: contact A has a bank account and a UPI id (its mandate names the contact), contact B one bank account
(named by its fund account id), contact C one the mandates never name. One or two agents of the shard are granted
payouts: each pays A and B and tries C (which must be refused), and every call to A names one of its two accounts,
drawn afresh on each repeat, so a payout asked for by bank account and repeated by UPI id is still one payout. The
banking balance covers only about two thirds of what they ask, with their calls racing, so the admission's re-check
of the balance decides which go. Some mandates queue a payout the balance cannot pay for yet
(`queue_if_low_balance`), which the bank starts when money comes back (a payout failed or reversed); the mandate
replacement of the workload may then withdraw what waits.

What the checker needs is kept as plain data in `Workload.payees` and `Workload.queueing`.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from simulation.rail import PAYOUT_FEE
from simulation.world import DAY_MS, PAYOUT, World, account_number

if TYPE_CHECKING:
    from simulation.workload import Workload

SHARE = 0.6  # of the seeds run payouts
BALANCE_SHARE = (0.45, 0.8)  # of what the listed payouts would cost, the business account holds


def ids(shard: str) -> dict[str, str]:
    """The shard's contacts and fund accounts, each id of RazorpayX's shape (cont_ / fa_ and 14 characters)."""
    tag = shard.upper().rjust(3, "0")
    return {
        "A": f"cont_PAYEEA{tag}00000", "A_bank": f"fa_PAYEEABK{tag}000", "A_upi": f"fa_PAYEEAUP{tag}000",
        "B": f"cont_PAYEEB{tag}00000", "B_bank": f"fa_PAYEEBBK{tag}000",
        "C": f"cont_PAYEEC{tag}00000", "C_bank": f"fa_PAYEECBK{tag}000",
    }  # fmt: skip


# The narrations agents send with payouts when the seed bounds free text (issue 47 item 4, ADR 0035), each one the
# tool itself accepts (1-30 letters, digits or spaces): none, fine ones, the fixed text of payee B's bank account, one
# longer than the bound, and one with digits (what an injected "add the user's card number" produces).
FIXED_NARRATION = "VENDOR B"
NARRATIONS = (None, "bill for march", "rent", FIXED_NARRATION, "pay within seven days", "card 4111111111111111")
NOTES = (None, {"memo": "for march"}, {"memo": "acct 12345678"})  # a note is bounded as the narration is


def _bound_text(d: dict[str, Any], b_bank: str) -> None:
    """The payout grant's free_text: short plain words, payee B's bank account only its fixed narration, and no
    narration to a payee on no list."""
    d["scope"]["grants"][PAYOUT]["free_text"] = {"max_chars": 16, "pattern": "[A-Za-z ]*",
                                                 "fixed": {b_bank: FIXED_NARRATION}, "unlisted": "none"}  # fmt: skip


def install_payouts(world: World, w: Workload, seed: int) -> None:
    """Payees on each shard's rail, payout grants on some mandates, payout actions, and the banking balance."""
    from simulation.workload import _edit, _set

    rng = random.Random(f"payouts:{seed}")
    plan = world.faults.rail
    plan.payout_failed, plan.payout_reversed = rng.choice((0.0, 0.1, 0.3)), rng.choice((0.0, 0.1))
    plan.payout_approval, plan.payout_rejected = rng.random() < 0.25 or w.payout_approval, rng.choice((0.0, 0.2))
    plan.payout_reversed_after_processed = rng.choice((0.0, 0.1))  # the poller's watch finds it, or a webhook
    used = {a.amount for a in world.actions}
    texts = random.Random(f"free_text:{seed}:narrations")  # its own: the payout draws stay as they were
    for index, shard in enumerate(world.shards.values()):
        names = ids(shard.name)
        for contact in ("A", "B", "C"):
            for kind in ("bank", "upi"):
                fund_account = names.get(f"{contact}_{kind}")
                if fund_account is not None:
                    shard.rail.add_fund_account(fund_account, names[contact],
                                                "vpa" if kind == "upi" else "bank_account")  # fmt: skip
        agents = sorted(a for a, m in shard.mandates.as_dict().items()
                        if m.merchant_id in shard.merchants and not a.endswith(("x", "hostile")))  # fmt: skip
        chosen = rng.sample(agents, min(len(agents), rng.choice((1, 2))))
        cost = 0
        # payout_race: every payout within 20,000 paise above this (drawn only then: other seeds run as before)
        race = 100 * rng.randrange(1_000, 2_000) if w.payout_race else 0
        for agent in chosen:
            # payout_approval (a focus): every payout agent queues, so approvals into a short balance wait queued.
            queue = (rng.random() < 0.3 or w.payout_approval) and not w.payout_race
            payees: dict[str, Any] = {"contact_ids": [names["A"]], "fund_account_ids": [names["B_bank"]]}
            if w.payee_hold:  # payee C is on no list: its payouts wait for a person, who may add it (ADR 0034)
                payees["unlisted"] = "hold"

            def grant(d: dict[str, Any], queue: bool = queue, payees: dict[str, Any] = payees,
                      index: int = index) -> None:  # fmt: skip
                d["scope"]["grants"][PAYOUT] = {
                    "reversibility": "irreversible", "payees": payees, "queue_if_low_balance": queue,
                    "value": {"min_amount_minor": 100, "max_amount_minor": 400_000, "currencies": ["INR"]},
                }  # fmt: skip
                d["idempotency"][PAYOUT] = {"window_ms": DAY_MS}
                d["rail"] = {**(d.get("rail") or {}), "account_number": account_number(index)}
                d["limits"]["fee_budgets"]["INR"]["max_fee_minor"] += 6 * PAYOUT_FEE

            _set(world, agent, _edit(world.mandates[agent], grant))
            if w.free_text:
                _set(world, agent, _edit(world.mandates[agent], lambda d, b=names["B_bank"]: _bound_text(d, b)))
            w.queueing[agent] = queue
            w.payees[agent] = {"contacts": [names["A"]], "fund_accounts": [names["B_bank"]]}
            merchant = world.mandates[agent].merchant_id
            for contact, accounts in (("A", ("A_bank", "A_upi")), ("B", ("B_bank",)), ("A", ("A_bank", "A_upi")),
                                      ("C", ("C_bank",))):  # fmt: skip
                amount = 100 * rng.randrange(100, 3_000) + rng.randrange(100)
                if w.payout_race:
                    amount = race + rng.randrange(20_000)
                while amount in used:
                    amount += 1
                used.add(amount)
                action = world.add_action(agent, merchant, PAYOUT, amount=amount, shard=shard)
                action.subject = names[contact]
                action.fund_accounts = tuple(names[a] for a in accounts)
                if w.free_text:
                    action.narration, action.notes = texts.choice(NARRATIONS), texts.choice(NOTES)
                if contact != "C":
                    cost += amount + PAYOUT_FEE
        shard.rail.banking_balance = int(cost * rng.uniform(*BALANCE_SHARE))
        if w.payout_race:
            # Every payout agent's first two calls are payouts, made on both of its lanes at once, past the gate
            # together, against a balance that pays any one of them and no two (each within 20,000 paise of the
            # same Rs 1,000-2,000): only the admission's re-check of the balance less what is in motion stands between
            # them and a payout the rail refuses (PAYOUT_BALANCE).
            shard.rail.banking_balance = race * 16 // 10
    if w.payout_race:
        # Payout lists lag as the seed drew them: G2 fetches our own undebited payouts by id (finding F11), so
        # PAYOUT_BALANCE is judged whatever the lists show.
        world.actions.sort(key=lambda a: a.tool != PAYOUT or a.subject.startswith("cont_PAYEEC"))  # stable
