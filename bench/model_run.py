"""`interlock bench scenarios --agent model`: every scenario direct and gated, several trials, the model choosing.

Each trial is a fresh stack per scenario (its own ledger and windows), the direct mode then the gated mode (task
binding off), then the task mode on a stack of its own (gated, the mandate requiring task binding, the harness
attaching the scenario's signed ticket to every call), exactly as the scripted bench runs them; only the driver
differs: the model never sees or chooses the signed task. Trial t samples with seed
`seed + t`, so a trial is reproducible on its own. Verdicts come from the sandbox journal (bench.metrics.judge).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent import CallRecord, Tools
from bench.env import ScenarioStack
from bench.metrics import Verdict, judge
from bench.model_agent import ModelAgent, RetryEvent, Transcript
from bench.model_llm import ChoiceModel, Decoding
from bench.run import TASK_MODE, Driver, run_scenario
from bench.scenario import Scenario

logger = logging.getLogger(__name__)

MODEL_MODES = ("direct", "gated", TASK_MODE)


@dataclass
class TrialRun:
    trial: int
    verdict: Verdict
    transcript: Transcript


def model_driver(model: ChoiceModel, decoding: Decoding, seed: int, sink: dict[str, Transcript]) -> Driver:
    async def drive(tools: Tools, env: ScenarioStack, mode: str, payments: dict[str, list[str]],
                    before_step: Callable[[int], None]) -> list[CallRecord]:  # fmt: skip
        agent = ModelAgent(model, tools, env.scenario, payments, gated=mode != "direct", seed=seed, decoding=decoding)
        try:
            return await agent.run(before_step)
        finally:
            sink[mode] = agent.transcript

    return drive


def run_model_bench(scenarios: list[Scenario], base: Path, model: ChoiceModel, decoding: Decoding, *, seed: int,
                    model_seed: int, trials: int, echo: Callable[[str], None],
                    save: Callable[[list[TrialRun]], None] | None = None,
                    first_trial: int = 1) -> list[TrialRun]:  # fmt: skip
    """Every scenario in each mode, *trials* times, numbered from *first_trial*; *save* is handed the runs so far
    after each scenario."""
    runs: list[TrialRun] = []
    for trial in range(first_trial, first_trial + trials):
        for scenario in scenarios:
            sink: dict[str, Transcript] = {}
            started = time.monotonic()
            driver = model_driver(model, decoding, model_seed + trial, sink)
            for run in run_scenario(scenario, base / f"trial{trial}", seed=seed, modes=MODEL_MODES, driver=driver):
                verdict = judge(run)
                transcript = sink.get(run.mode, Transcript())
                runs.append(TrialRun(trial, verdict, transcript))
                flag = "BROKEN" if verdict.violated else ("FALSE-BLOCK" if verdict.false_block else "ok")
                echo(f"t{trial} {scenario.id:<40} {run.mode:<6} moved {verdict.moved:>9} "
                     f"entities {verdict.entities:>3} {flag:<11} decisions {transcript.decisions:>3} "
                     f"{verdict.states}")  # fmt: skip
            logger.info("%s trial %d: %.1f s", scenario.id, trial, time.monotonic() - started)
            if save is not None:
                save(runs)
    return runs


def save_runs(path: Path, runs: list[TrialRun], meta: dict[str, Any]) -> None:
    """The runs so far, with what produced them (*meta*: setting, command, elapsed), as JSON."""
    path.write_text(json.dumps({"meta": meta, "runs": [dataclasses.asdict(r) for r in runs]}, indent=1))


def load_runs(path: Path) -> tuple[list[TrialRun], dict[str, Any]]:
    data = json.loads(path.read_text())
    runs = []
    for raw in data["runs"]:
        transcript = dict(raw["transcript"])
        transcript["events"] = [RetryEvent(**e) for e in transcript["events"]]
        runs.append(TrialRun(raw["trial"], Verdict(**raw["verdict"]), Transcript(**transcript)))
    return runs, data["meta"]
