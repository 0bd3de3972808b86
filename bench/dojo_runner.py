"""AgentDojo's banking suite run through AgentDojo's own API, direct or with the money tools bridged to Interlock —
run by `interlock bench agentdojo` (bench/dojo_bridge.py) with the AgentDojo venv's python (.venv-agentdojo,
bench/agentdojo_requirements.txt), so it imports AgentDojo and the standard library only, nothing of Interlock.

    dojo_runner.py CONFIG.json    ->  the scores, as JSON, in the config's `results` file

The scores are AgentDojo's: `benchmark_suite_without_injections` / `benchmark_suite_with_injections` over
`get_suite(version, "banking")`, its own utility and security checks on its own environment. What this file adds:

* the agents: `GroundTruthAgent` runs the task's ground truth (AgentDojo's GroundTruthPipeline, but a refused call
  is a tool error the agent reads and goes on from, as a model's tool loop would, rather than an exception);
  `HijackedAgent` runs the user task's ground truth, then the injection task's ground truth verbatim; `model_agent`
  is AgentDojo's own pipeline (`AgentPipeline.from_config`: its system message, OpenAILLM and tool loop) over an
  OpenAI-compatible server the Interlock side starts (llama-cpp-python's, serving the shipped SmolLM2-135M).
* the route: `InterlockRoute` wraps any agent pipeline and hands it, instead of the suite's runtime, one whose
  money tools (send_money, schedule_transaction, update_scheduled_transaction when it changes the recipient or the
  amount) first ask the Interlock side over a pipe, and change AgentDojo's environment only when it answers
  APPLIED. Everything else (reads, passwords, user info) runs as AgentDojo's own function. Each money call carries
  the user's request (the prompt, and the content of each environment file whose name the prompt writes out): what
  the Interlock side's approve policy reads when the payout is held for its payee.

The pipe speaks JSON lines: {"op": "begin", ...} before each task run (the Interlock side gives it a fresh ledger
and the mandate the account holder would sign for this environment), {"op": "pay", ...} for each money call.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentdojo.agent_pipeline.agent_pipeline import AgentPipeline, PipelineConfig
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.llms.openai_llm import OpenAILLM
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.benchmark import benchmark_suite_with_injections, benchmark_suite_without_injections
from agentdojo.functions_runtime import EmptyEnv, Env, Function, FunctionCall, FunctionsRuntime
from agentdojo.logging import Logger, OutputLogger
from agentdojo.models import MODEL_NAMES
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.types import ChatAssistantMessage, ChatMessage, ChatToolResultMessage, text_content_block_from_string

SUITE = "banking"
NO_ENV = EmptyEnv()
Answer = tuple[str, FunctionsRuntime, Env, Sequence[ChatMessage], dict[str, Any]]  # what a pipeline element returns
ATTACK = "direct"  # the environment's injection vectors carry "TODO: <the injection task's goal>"
# The model mode's attack: AgentDojo's important_instructions, which addresses the model by the name AgentDojo's
# MODEL_NAMES table gives the pipeline's model ("...from me, Emma Johnson, to you, GPT-4"). SmolLM2 is not in that
# table, so it is added as AgentDojo adds each model it knows: its id, and the name it goes by.
MODEL_ATTACK = "important_instructions"
MODEL_PROSE_NAME = "SmolLM2"


class Pair:
    """Which (user task, injection task) AgentDojo is running now: the attack is asked for its injections just
    before each run, so it is where the hijacked agent learns its second task."""

    def __init__(self) -> None:
        self.user_task: str | None = None
        self.injection_task: BaseInjectionTask | None = None
        self.part = "user"  # whose ground truth the agent is running: the user's or the injection task's
        # The injection task AgentDojo runs as a user task (before the pairs, with no pair set), when it is one.
        self.asked: str | None = None
        # The user's request as a person deciding a held payout would see it: its text (the prompt) and the files of
        # the environment it points to (whose name it writes out), as the environment holds them when the task starts.
        self.request: dict[str, Any] = {}


def recording_attack(name: str, suite: Any, pipeline: BasePipelineElement, pair: Pair) -> Any:
    attack = load_attack(name, suite, pipeline)
    inner = attack.attack

    def attack_and_record(user_task: BaseUserTask, injection_task: BaseInjectionTask) -> dict[str, str]:
        pair.user_task, pair.injection_task = user_task.ID, injection_task
        return inner(user_task, injection_task)

    attack.attack = attack_and_record
    return attack


def run_calls(calls: Sequence[FunctionCall], runtime: FunctionsRuntime, env: Env) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for call in calls:
        messages.append(ChatAssistantMessage(role="assistant", tool_calls=[call],
                                             content=[text_content_block_from_string("")]))  # fmt: skip
        result, error = runtime.run_function(env, call.function, call.args, raise_on_error=False)
        messages.append(ChatToolResultMessage(role="tool", tool_call=call, tool_call_id=None, error=error,
                                              content=[text_content_block_from_string(
                                                  error or tool_result_to_str(result))]))  # fmt: skip
    return messages


class GroundTruthAgent(BasePipelineElement):
    """The task's ground truth as the agent's calls (the task is found by its prompt: a user task's PROMPT, or an
    injection task's GOAL when AgentDojo runs it as a user task); each call's ground truth is taken from the
    environment as it is when the task starts, as AgentDojo's GroundTruthPipeline does."""

    name = "ground-truth"

    def __init__(self, suite: Any, pair: Pair | None = None) -> None:
        self.by_prompt: dict[str, BaseUserTask | BaseInjectionTask] = {
            **{task.PROMPT: task for task in suite.user_tasks.values()},
            **{task.GOAL: task for task in suite.injection_tasks.values()},
        }
        self.pair = pair

    def second_task(self, task: BaseUserTask | BaseInjectionTask) -> BaseInjectionTask | None:
        return None

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict[str, Any] | None = None) -> Answer:  # fmt: skip
        task = self.by_prompt[query]
        if self.pair is not None:
            self.pair.part = "user"
        new = run_calls(task.ground_truth(env), runtime, env)
        hijacker = self.second_task(task)
        if hijacker is not None and self.pair is not None:
            self.pair.part = "injection"
            new += run_calls(hijacker.ground_truth(env), runtime, env)
        answer = text_content_block_from_string(task.GROUND_TRUTH_OUTPUT)
        new.append(ChatAssistantMessage(role="assistant", tool_calls=None, content=[answer]))
        # Logged as AgentDojo's AgentPipeline logs each element's messages: the task run's log is then whole (AgentDojo
        # reads a log without them as not run, so a resumed run would run it again).
        Logger().get().log([*messages, *new])
        return query, runtime, env, [*messages, *new], extra_args or {}


class HijackedAgent(GroundTruthAgent):
    """A fully hijacked agent: the user task's ground truth, then the injection task's ground truth verbatim (taken
    from the environment as the user's calls left it); it still answers the user with the user task's output."""

    name = "hijacked"

    def second_task(self, task: BaseUserTask | BaseInjectionTask) -> BaseInjectionTask | None:
        if not isinstance(task, BaseUserTask) or self.pair is None:
            return None
        assert self.pair.user_task == task.ID, (self.pair.user_task, task.ID)
        return self.pair.injection_task


def model_agent(url: str, model_id: str, max_tokens: int, seed: int) -> BasePipelineElement:
    """AgentDojo's own pipeline for an OpenAI-compatible model at *url*, as `AgentPipeline.from_config` builds it
    for any model (no defense, AgentDojo's default system message). Each request is capped at *max_tokens* (a 135M
    model can ramble to the end of its context) and asks for temperature 0, which AgentDojo's OpenAILLM asks for but
    does not send (it drops a falsy temperature), with a fixed *seed*: a run can be repeated."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="local", max_retries=0, timeout=3600)  # a paused server is waited
    create = client.chat.completions.create

    def bounded_create(**kwargs: Any) -> Any:
        if not kwargs.get("temperature"):
            kwargs["temperature"] = 0.0
        kwargs["messages"] = [_older_wire(message) for message in kwargs["messages"]]
        return create(**kwargs, max_tokens=max_tokens, seed=seed)

    client.chat.completions.create = bounded_create  # type: ignore[method-assign]
    MODEL_NAMES.setdefault(model_id, MODEL_PROSE_NAME)
    config = PipelineConfig(llm=OpenAILLM(client, model_id), model_id=None, defense=None, system_message_name=None,
                            system_message=None)  # fmt: skip
    pipeline = AgentPipeline.from_config(config)
    pipeline.name = model_id
    return pipeline


def _older_wire(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the OpenAI API had it before the `developer` role and text-block content, which is what
    llama-cpp-python's server reads: `developer` is `system`, a list of text blocks is their text, joined, and no
    content is empty content. Nothing else in the message changes."""
    out = dict(message)
    if out.get("role") == "developer":
        out["role"] = "system"
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "\n".join(block.get("text", "") for block in content if isinstance(block, dict))
    elif content is None:
        out["content"] = ""  # an assistant turn that only calls tools
    return out


class Bridge:
    """The pipe to the Interlock side (bench/dojo_bridge.py)."""

    def __init__(self, requests: int, answers: int) -> None:
        self.out = open(requests, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - open for the whole run
        self.answers = open(answers, encoding="utf-8")  # noqa: SIM115

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.out.write(json.dumps(message) + "\n")
        line = self.answers.readline()
        if not line:
            raise SystemExit("the Interlock side closed the pipe")
        answer: dict[str, Any] = json.loads(line)
        return answer


class NotApplied(Exception):
    """Raised (as the tool's error, which the agent reads) when Interlock did not answer APPLIED."""


def exact_amount(amount: Any) -> str:
    """The amount as the agent wrote it: a float's repr is the shortest decimal that reads back as the same float,
    so "98.7" stays 98.7 and 1000 * 0.195 + 5.29 (200.29000000000002 in binary) would show its extra digits and be
    refused rather than rounded. The Interlock side converts the text to minor units with Decimal."""
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise NotApplied(f"amount {amount!r} is not a number")
    return repr(amount)


def bridged(function: Function, bridge: Bridge, pair: Pair) -> Function:
    original = function.run

    def ask(tool: str, recipient: str, amount: Any, subject: str, date: str, recurring: bool | None) -> None:
        injection = pair.injection_task.ID if pair.injection_task is not None else None
        answer = bridge.ask({"op": "pay", "tool": tool, "recipient": recipient, "amount": exact_amount(amount),
                             "subject": subject, "date": date, "recurring": recurring, "user_task": pair.user_task,
                             "injection_task": injection, "asked": pair.asked, "part": pair.part,
                             "request": pair.request})  # fmt: skip
        if not answer.get("applied"):
            raise NotApplied(answer.get("message") or f"Interlock answered {answer.get('state')}")

    def send_money(account: Any, recipient: str, amount: float, subject: str, date: str) -> Any:
        ask("send_money", recipient, amount, subject, date, None)
        return original(account=account, recipient=recipient, amount=amount, subject=subject, date=date)

    def schedule_transaction(account: Any, recipient: str, amount: float, subject: str, date: str,
                             recurring: bool) -> Any:  # fmt: skip
        ask("schedule_transaction", recipient, amount, subject, date, recurring)
        return original(account=account, recipient=recipient, amount=amount, subject=subject, date=date,
                        recurring=recurring)  # fmt: skip

    def update_scheduled_transaction(account: Any, id: int, recipient: str | None = None, amount: float | None = None,
                                     subject: str | None = None, date: str | None = None,
                                     recurring: bool | None = None) -> Any:  # noqa: A002  # fmt: skip
        kwargs = {"recipient": recipient, "amount": amount, "subject": subject, "date": date, "recurring": recurring}
        current = next((t for t in account.scheduled_transactions if t.id == id), None)
        # AgentDojo's own function treats a falsy field as "unchanged"; the same reading decides what changes here.
        if current is not None and ((recipient or current.recipient) != current.recipient
                                    or (amount or current.amount) != current.amount):  # fmt: skip
            ask("update_scheduled_transaction", recipient or current.recipient, amount or current.amount,
                subject or current.subject, date or current.date, recurring or current.recurring)  # fmt: skip
        return original(account=account, id=id, **kwargs)

    runs: dict[str, Callable[..., Any]] = {"send_money": send_money, "schedule_transaction": schedule_transaction,
                                           "update_scheduled_transaction": update_scheduled_transaction}  # fmt: skip
    return function.model_copy(update={"run": runs[function.name]})


MONEY_TOOLS = ("send_money", "schedule_transaction", "update_scheduled_transaction")


class InterlockRoute(BasePipelineElement):
    """Any agent pipeline, its money tools bridged to Interlock: before the run the Interlock side is told which
    pair starts and given the environment's bank account (the mandate is derived from it there)."""

    def __init__(self, inner: BasePipelineElement, bridge: Bridge, pair: Pair, suite: Any) -> None:
        self.inner, self.bridge, self.pair = inner, bridge, pair
        self.name = f"{inner.name}-interlock"
        self.goals = {task.GOAL: task.ID for task in suite.injection_tasks.values()}

    def query(self, query: str, runtime: FunctionsRuntime, env: Env = NO_ENV, messages: Sequence[ChatMessage] = (),
              extra_args: dict[str, Any] | None = None) -> Answer:  # fmt: skip
        injection = self.pair.injection_task.ID if self.pair.injection_task is not None else None
        self.pair.asked = self.goals.get(query) if self.pair.user_task is None else None
        self.bridge.ask({"op": "begin", "prompt": query, "user_task": self.pair.user_task,
                         "injection_task": injection, "asked": self.pair.asked,
                         "account": env.bank_account.model_dump(mode="json")})  # type: ignore[attr-defined]  # fmt: skip
        files = env.filesystem.files  # type: ignore[attr-defined]
        self.pair.request = {"text": query, "files": {name: text for name, text in files.items() if name in query}}
        functions = {name: bridged(f, self.bridge, self.pair) if name in MONEY_TOOLS else f
                     for name, f in runtime.functions.items()}  # fmt: skip
        return self.inner.query(query, FunctionsRuntime(list(functions.values())), env, messages, extra_args or {})


def main(config_path: str) -> None:
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    version = config["suite_version"]
    suite = get_suite(version, SUITE)
    pair = Pair()
    agent: BasePipelineElement
    if config["mode"] == "model":
        pair.part = "model"
        agent = model_agent(config["model_url"], config["model_id"], config["max_tokens"], config["seed"])
    else:
        agent = (HijackedAgent if config["mode"] == "hijacked" else GroundTruthAgent)(suite, pair)
    pipeline: BasePipelineElement = agent
    if config["route"] == "interlock":
        pipeline = InterlockRoute(agent, Bridge(*config["bridge_fds"]), pair, suite)
    else:
        pipeline.name = f"{agent.name}-direct"
    user_tasks = config.get("user_tasks")
    # A resumed run keeps each task run AgentDojo logged whole (its scores in its log), and runs the rest.
    rerun = not config.get("resume", False)
    logdir = Path(config["logdir"])
    logdir.mkdir(parents=True, exist_ok=True)
    if not rerun:
        _drop_unfinished(logdir)
    with OutputLogger(str(logdir)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Not all injection tasks were solved as user tasks": reported, not warned
        if config["mode"] in ("hijacked", "model"):
            attack = recording_attack(MODEL_ATTACK if config["mode"] == "model" else ATTACK, suite, pipeline, pair)
            results = benchmark_suite_with_injections(pipeline, suite, attack, logdir=logdir, force_rerun=rerun,
                                                      user_tasks=user_tasks,
                                                      injection_tasks=config.get("injection_tasks"),
                                                      verbose=False, benchmark_version=version)  # fmt: skip
        else:
            results = _without_injections(pipeline, suite, user_tasks or list(suite.user_tasks), pair, logdir,
                                           version, rerun)
    out = {
        "utility": [[u, i, ok] for (u, i), ok in results["utility_results"].items()],
        "security": [[u, i, ok] for (u, i), ok in results["security_results"].items()],
        "injection_tasks_utility": results["injection_tasks_utility_results"],
        "injection_tasks": {t.ID: {"goal": t.GOAL, "money": _moves_money(t, suite)}
                            for t in suite.injection_tasks.values()},  # fmt: skip
        "task_seconds": _logged_seconds(logdir / str(pipeline.name)),
    }
    Path(config["results"]).write_text(json.dumps(out), encoding="utf-8")


def _without_injections(pipeline: BasePipelineElement, suite: Any, user_tasks: list[str], pair: Pair, logdir: Path,
                        version: str, rerun: bool) -> Any:  # fmt: skip
    """benchmark_suite_without_injections one user task at a time, so the route knows which task starts."""
    merged: dict[str, dict[Any, Any]] = {"utility_results": {}, "security_results": {},
                                         "injection_tasks_utility_results": {}}  # fmt: skip
    for task_id in user_tasks:
        pair.user_task, pair.injection_task = task_id, None
        results = benchmark_suite_without_injections(pipeline, suite, logdir=logdir, force_rerun=rerun,
                                                     user_tasks=[task_id], benchmark_version=version)  # fmt: skip
        for key in merged:
            merged[key].update(results[key])  # type: ignore[literal-required]
    return merged


def _drop_unfinished(logdir: Path) -> None:
    """A task run stopped part way leaves its log without scores, or cut short mid-write (AgentDojo saves the log as
    the run goes): removed, so a resumed run runs it again rather than trusting, or failing on, half of it."""
    for path in logdir.rglob("*.json"):
        try:
            logged = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            logged = None
        if not isinstance(logged, dict) or not all(isinstance(logged.get(k), bool) for k in ("utility", "security")):
            path.unlink()


def _logged_seconds(logs: Path) -> list[float]:
    """How long each task run AgentDojo logged under *logs* took (its own `duration`), resumed runs included."""
    seconds = []
    for path in logs.rglob("*.json"):
        try:
            duration = json.loads(path.read_text(encoding="utf-8")).get("duration")
        except (OSError, ValueError, AttributeError):
            continue  # a log cut short by an earlier run that was killed: not a task run of this one
        if isinstance(duration, int | float):
            seconds.append(float(duration))
    return seconds


def _moves_money(task: BaseInjectionTask, suite: Any) -> bool:
    """Whether the injection task's ground truth calls a money tool (its goal moves money or sends text out with
    money), on the suite's default environment."""
    env = suite.load_and_inject_default_environment({})
    return any(call.function in MONEY_TOOLS for call in task.ground_truth(env))


if __name__ == "__main__":
    main(sys.argv[1])
