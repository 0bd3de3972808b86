"""`interlock bench scenarios` and `interlock bench perf`: run, print, and regenerate RESULTS.md sections."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import click

from interlock.results import REPO, RESULTS, commit_id, write_section

logger = logging.getLogger(__name__)

SCENARIO_PLOT = Path("docs/bench-scenarios.png")
PERF_PLOT = Path("docs/bench-perf.png")


@click.group("bench")
def bench_group() -> None:
    """The scenario benchmark and the performance bench (SPEC §13), direct vs gated."""


@bench_group.command("scenarios")
@click.option("--only", multiple=True, help="scenario id, id prefix (B3) or family letter (D); repeatable")
@click.option("--seed", type=int, default=7, show_default=True, help="seed of the sandbox fault generator")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), help="data directory (default: a temp dir)")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the tables; leave RESULTS.md and the plot alone")
@click.option("--purpose-check", type=click.Choice(["off", "hold", "block"]), default="off", show_default=True,
              help="G5 in every gated mode's mandate; when on, the section is `scenarios-g5-<mode>` and no plot")
@click.option("--agent", type=click.Choice(["scripted", "model"]), default="scripted", show_default=True,
              help="model: SmolLM2-135M-Instruct chooses every call (`make bench-model`), direct and gated, its own "
              "`scenarios-model` section")  # fmt: skip
@click.option("--trials", type=int, default=2, show_default=True, help="with --agent model: trials per scenario")
@click.option("--first-trial", type=int, default=1, show_default=True,
              help="with --agent model: number the trials from here (a process running trial 2 alone beside another "
              "running trial 1 samples exactly as one process running both would)")  # fmt: skip
@click.option("--temperature", type=float, default=0.7, show_default=True, help="with --agent model")
@click.option("--model-seed", type=int, default=0, show_default=True,
              help="with --agent model: trial t samples with seed model-seed + t")  # fmt: skip
@click.option("--from-runs", "from_runs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="with --agent model: write the section from the model-runs.json of earlier runs (e.g. families run "
              "in parallel processes with --no-write), without running anything")  # fmt: skip
def scenarios_command(only: tuple[str, ...], seed: int, work: Path | None, results: Path, no_write: bool,
                      purpose_check: str, agent: str, trials: int, first_trial: int, temperature: float,
                      model_seed: int, from_runs: tuple[Path, ...]) -> None:  # fmt: skip
    """Run every scenario in each mode (direct, gated, gated with task binding required) and write the
    `scenarios` section of RESULTS.md (`scenarios-g5-hold` / `-block` with --purpose-check); with --agent model,
    a small local model chooses the calls, direct and gated, and the section is `scenarios-model`."""
    if agent == "model":
        if purpose_check != "off":
            raise click.UsageError("--agent model runs with G5 off (the mandate as shipped)")
        if from_runs:
            _model_section(from_runs, results, no_write)
        else:
            _model_scenarios(only, seed, work, results, no_write, trials, temperature, model_seed, first_trial)
        return
    from bench.metrics import judge
    from bench.report import plot, render
    from bench.run import run_scenario
    from bench.scenario import load_scenarios

    scenarios = load_scenarios(only=list(only) or None)
    if not scenarios:
        raise click.UsageError(f"no scenario matches {list(only)}")
    base = work or Path(tempfile.mkdtemp(prefix="interlock-bench-"))
    started = time.monotonic()
    verdicts = []
    for scenario in scenarios:
        extra = {"purpose_check": {"mode": purpose_check}} if purpose_check != "off" else None
        for run in run_scenario(scenario, base, seed=seed, mandate_extra=extra):
            verdict = judge(run)
            verdicts.append(verdict)
            flag = "BROKEN" if verdict.violated else ("FALSE-BLOCK" if verdict.false_block else "ok")
            click.echo(f"{scenario.id:<42} {run.mode:<6} moved {verdict.moved:>9} entities {verdict.entities:>3} "
                       f"{flag:<11} {verdict.states} {'; '.join(verdict.notes)}")  # fmt: skip
    elapsed = time.monotonic() - started
    (base / "verdicts.json").write_text(json.dumps([dataclasses.asdict(v) for v in verdicts], indent=1))
    command = "interlock bench scenarios" + "".join(f" --only {o}" for o in only) + f" --seed {seed}"
    section = "scenarios"
    if purpose_check != "off":
        command, section = command + f" --purpose-check {purpose_check}", f"scenarios-g5-{purpose_check}"
    image = None if no_write or section != "scenarios" else plot(verdicts, scenarios, REPO / SCENARIO_PLOT)
    text = render(verdicts, scenarios, seed=seed, command=command, plot=SCENARIO_PLOT if image is not None else None,
                  elapsed_s=elapsed, purpose_check=purpose_check)  # fmt: skip
    click.echo(text)
    if not no_write:
        write_section(section, text, results)
        click.echo(f"wrote the {section} section of {results}")
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _model_scenarios(only: tuple[str, ...], seed: int, work: Path | None, results: Path, no_write: bool, trials: int,
                     temperature: float, model_seed: int, first_trial: int = 1) -> None:  # fmt: skip
    from bench.model_llm import MODEL_NAME, QUANTISATION, Decoding, ModelUnavailable, load_model, runtime_version
    from bench.model_report import Setting, render
    from bench.model_run import TrialRun, run_model_bench, save_runs
    from bench.scenario import load_scenarios

    scenarios = load_scenarios(only=list(only) or None)
    if not scenarios:
        raise click.UsageError(f"no scenario matches {list(only)}")
    decoding = Decoding(temperature=temperature)
    started = time.monotonic()
    try:
        model = load_model(decoding)
        runtime = runtime_version()
    except ModelUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    setting = Setting(MODEL_NAME, QUANTISATION, runtime, decoding.describe(), model_seed, trials,
                      time.monotonic() - started)  # fmt: skip
    base = work or Path(tempfile.mkdtemp(prefix="interlock-bench-model-"))
    base.mkdir(parents=True, exist_ok=True)
    command = ("interlock bench scenarios --agent model" + "".join(f" --only {o}" for o in only)
               + f" --seed {seed} --trials {trials} --temperature {temperature} --model-seed {model_seed}"
               + (f" --first-trial {first_trial}" if first_trial != 1 else ""))  # fmt: skip

    def save(runs: list[TrialRun]) -> None:
        meta = {"setting": dataclasses.asdict(setting), "seed": seed, "command": command,
                "elapsed_s": time.monotonic() - started, "commit": commit_id()}  # fmt: skip
        save_runs(base / "model-runs.json", runs, meta)

    runs = run_model_bench(scenarios, base, model, decoding, seed=seed, model_seed=model_seed, trials=trials,
                           echo=click.echo, save=save, first_trial=first_trial)  # fmt: skip
    save(runs)
    text = render(runs, scenarios, setting, seed=seed, command=command, elapsed_s=time.monotonic() - started)
    _publish("scenarios-model", text, results, no_write)
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _model_section(paths: tuple[Path, ...], results: Path, no_write: bool) -> None:
    """The section from saved runs: several processes (e.g. one per family group) merged, each named."""
    from bench.model_report import Setting, render
    from bench.model_run import load_runs
    from bench.scenario import load_scenarios

    runs, metas, paces, trials = [], [], [], []
    for path in paths:
        some, meta = load_runs(path)
        runs += some
        metas.append(meta)
        trials.append(", ".join(str(t) for t in sorted({r.trial for r in some})))  # what the file holds
        decisions = sum(r.transcript.decisions for r in some)
        paces.append(sum(r.transcript.model_s for r in some) / decisions if decisions else 0.0)
    ran = {r.verdict.scenario_id for r in runs}
    asked = load_scenarios(only=[o for m in metas for o in re.findall(r"--only (\S+)", m["command"])] or None)
    scenarios = [s for s in asked if s.id in ran]
    missing = [s.id for s in asked if s.id not in ran]
    setting = Setting(**metas[0]["setting"])
    command = " ; ".join(f"`{m['command']}` (trial {held}: {m['elapsed_s']:.0f} s, {pace:.2f} s a decision, at "
                         f"{m['commit']})" for m, held, pace in zip(metas, trials, paces, strict=True))  # fmt: skip
    elapsed = max(m["elapsed_s"] for m in metas)
    commits = sorted({m["commit"] for m in metas})
    text = render(runs, scenarios, setting, seed=metas[0]["seed"], command=command, elapsed_s=elapsed,
                  processes=len(metas), commit=", ".join(commits), missing=missing)  # fmt: skip
    _publish("scenarios-model", text, results, no_write)


@bench_group.command("perf")
@click.option("--latency-ms", type=int, default=200, show_default=True, help="the slow rail's added latency")
@click.option("--calls", type=int, default=200, show_default=True, help="sequential calls per latency sample")
@click.option("--slow-calls", type=int, default=30, show_default=True, help="sequential calls at the slow rail")
@click.option("--concurrency", default="1,8,32,64", show_default=True, help="concurrent agents, end to end")
@click.option("--calls-per-agent", type=int, default=3, show_default=True, help="calls per agent, end to end")
@click.option("--gate-workers", "gate_counts", default="1,2,4", show_default=True, help="gate workers, gates alone")
@click.option("--e2e-gate-workers", type=int, default=0,
              help="gate workers end to end  [default: the most of --gate-workers]")  # fmt: skip
@click.option("--decisions", type=int, default=400, show_default=True, help="proposals per gate-worker sample")
@click.option("--rail-concurrency", default="1,16,64,256", show_default=True,
              help="INTERLOCK_RAIL_CONCURRENCY levels for the rail worker alone ('' to skip)")  # fmt: skip
@click.option("--rail-rounds", type=int, default=4, show_default=True,
              help="rail worker alone: calls per level = concurrency x rounds")  # fmt: skip
@click.option("--rails", default="sandbox,double", show_default=True, help="rails for the rail worker alone")
@click.option("--definite-faults", default="ambiguous_504,slow,dup_response", show_default=True,
              help="sandbox faults for time to definite ('' to skip)")  # fmt: skip
@click.option("--definite-calls", type=int, default=8, show_default=True, help="ambiguous refunds per fault")
@click.option("--redis-calls", type=int, default=50, show_default=True,
              help="sequential gated calls whose Redis commands are counted (0 to skip)")  # fmt: skip
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), help="data directory (default: a temp dir)")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the tables; leave RESULTS.md and the plot alone")
@click.option("--shards", "shard_counts", default="",
              help="e.g. 1,2,4: run the throughput-vs-shards table instead (its own `perf-shards` section)")
@click.option("--shard-rail-concurrency", default="2,64", show_default=True,
              help="with --shards: INTERLOCK_RAIL_CONCURRENCY levels (small: the rail worker is the bottleneck)")
@click.option("--shard-clients", type=int, default=40, show_default=True, help="with --shards: MCP clients per shard")
@click.option("--shard-calls", type=int, default=5, show_default=True, help="with --shards: refunds per client")
@click.option("--webhooks", "webhook_calls", type=int, default=0,
              help="N: run time to definite with webhooks and by polling only, N ambiguous refunds each, instead "
              "(its own `perf-webhooks` section)")  # fmt: skip
@click.option("--forged", type=int, default=20, show_default=True, help="with --webhooks: forged deliveries to post")
@click.option("--profile", "profile_calls", type=int, default=0,
              help="N: profile N gated refunds instead: each actor's CPU by cost centre and function (its own "
              "`perf-profile` section)")  # fmt: skip
@click.option("--profile-agents", type=int, default=8, show_default=True, help="with --profile: concurrent agents")
def perf_command(latency_ms: int, calls: int, slow_calls: int, concurrency: str, calls_per_agent: int,
                 gate_counts: str, e2e_gate_workers: int, decisions: int, rail_concurrency: str, rail_rounds: int,
                 rails: str, definite_faults: str, definite_calls: int, redis_calls: int, work: Path | None,
                 results: Path,
                 no_write: bool, shard_counts: str, shard_rail_concurrency: str, shard_clients: int,
                 shard_calls: int, webhook_calls: int, forged: int, profile_calls: int,
                 profile_agents: int) -> None:  # fmt: skip
    """Direct vs gated latency and throughput, the per-hop breakdown, time to definite, the rail worker alone;
    writes the `perf` section of RESULTS.md. With --shards, throughput against the number of shards instead
    (the `perf-shards` section)."""
    if webhook_calls:
        _perf_webhooks(webhook_calls, forged, work, results, no_write)
        return
    if profile_calls:
        _perf_profile(profile_calls, profile_agents, work, results, no_write)
        return
    if shard_counts:
        _perf_shards(_ints(shard_counts), _ints(shard_rail_concurrency), latency_ms, shard_clients, shard_calls,
                     work, results, no_write)  # fmt: skip
        return
    from bench.perf import PerfConfig, run_perf
    from bench.perf_report import plot, render, summary

    config = PerfConfig(latency_ms=latency_ms, calls=calls, slow_calls=slow_calls, concurrency=_ints(concurrency),
                        calls_per_agent=calls_per_agent, gate_workers=_ints(gate_counts),
                        e2e_gate_workers=e2e_gate_workers, decisions=decisions,
                        rail_concurrency=_ints(rail_concurrency), rail_rounds=rail_rounds, rails=_names(rails),
                        definite_faults=_names(definite_faults), definite_calls=definite_calls,
                        redis_calls=redis_calls)  # fmt: skip
    base = work or Path(tempfile.mkdtemp(prefix="interlock-perf-"))
    started = time.monotonic()
    report = run_perf(config, base, echo=click.echo)
    options = {"--latency-ms": latency_ms, "--calls": calls, "--slow-calls": slow_calls, "--concurrency": concurrency,
               "--calls-per-agent": calls_per_agent, "--gate-workers": gate_counts,
               "--e2e-gate-workers": e2e_gate_workers, "--decisions": decisions,
               "--rail-concurrency": rail_concurrency, "--rail-rounds": rail_rounds, "--rails": rails,
               "--definite-faults": definite_faults, "--definite-calls": definite_calls,
               "--redis-calls": redis_calls}  # fmt: skip
    command = "interlock bench perf " + " ".join(f"{name} {value if value != '' else repr('')}"
                                                 for name, value in options.items())  # fmt: skip
    image = None if no_write else plot(report, REPO / PERF_PLOT)
    text = render(report, command=command, plot=PERF_PLOT if image is not None else None)
    click.echo(text)
    click.echo(f"{summary(report)}  ({time.monotonic() - started:.0f} s)")
    if not no_write:
        write_section("perf", text, results)
        click.echo(f"wrote the perf section of {results}")
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _perf_profile(calls: int, agents: int, work: Path | None, results: Path, no_write: bool) -> None:
    from bench.perf_profile import render, run_profile

    base = work or Path(tempfile.mkdtemp(prefix="interlock-perf-profile-"))
    report = run_profile(base, calls, agents, echo=click.echo)
    text = render(report, command=f"interlock bench perf --profile {calls} --profile-agents {agents}")
    _publish("perf-profile", text, results, no_write)
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _perf_webhooks(calls: int, forged: int, work: Path | None, results: Path, no_write: bool) -> None:
    from bench.perf_webhooks import headline, render, run_webhooks

    base = work or Path(tempfile.mkdtemp(prefix="interlock-perf-webhooks-"))
    report = run_webhooks(base, calls, forged, echo=click.echo)
    text = render(report, command=f"interlock bench perf --webhooks {calls} --forged {forged}")
    click.echo(text)
    click.echo(headline(report))
    if not no_write:
        write_section("perf-webhooks", text, results)
        click.echo(f"wrote the perf-webhooks section of {results}")
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _perf_shards(shard_counts: tuple[int, ...], concurrencies: tuple[int, ...], latency_ms: int, clients: int,
                 calls: int, work: Path | None, results: Path, no_write: bool) -> None:  # fmt: skip
    from bench.perf_shards import load_average, render, run_shards

    base = work or Path(tempfile.mkdtemp(prefix="interlock-perf-shards-"))
    load_at_start = load_average()
    samples = run_shards(base, shard_counts, concurrencies, latency_ms, clients, calls, echo=click.echo)
    command = (f"interlock bench perf --shards {','.join(map(str, shard_counts))} --shard-rail-concurrency "
               f"{','.join(map(str, concurrencies))} --latency-ms {latency_ms} --shard-clients {clients} "
               f"--shard-calls {calls}")  # fmt: skip
    text = render(samples, latency_ms=latency_ms, command=command, load_at_start=load_at_start)
    _publish("perf-shards", text, results, no_write)
    if work is None:
        shutil.rmtree(base, ignore_errors=True)


def _publish(section: str, text: str, results: Path, no_write: bool) -> None:
    """Print a section's text and, unless --no-write, write it into RESULTS.md."""
    click.echo(text)
    if not no_write:
        write_section(section, text, results)
        click.echo(f"wrote the {section} section of {results}")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@bench_group.command("purpose")
@click.option("--models", default="minilm,wordllama", show_default=True, help="candidate models to measure")
@click.option("--rounds", type=int, default=10, show_default=True, help="timing rounds over the labelled set")
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the tables; leave RESULTS.md alone")
def purpose_command(models: str, rounds: int, results: Path, no_write: bool) -> None:
    """G5's judge on its labelled set (bench/purpose_cases.yaml) for each candidate model: precision, recall,
    false-hold rate, the threshold chosen from the set, load time and added time per money call; writes the
    `purpose` section of RESULTS.md."""
    from bench.purpose import evaluate_model, load_cases
    from bench.purpose_report import render
    from gate_workers.purpose_model import DEFAULT_MODEL, PACKAGES, installed_mb
    from interlock.mandate import load_mandate
    from ledger.db import open_ledger

    data = load_cases()
    mandate = load_mandate(REPO / "deploy" / "mandate.example.yaml")
    with tempfile.TemporaryDirectory(prefix="interlock-purpose-") as tmp:
        ledger = open_ledger(Path(tmp) / "ledger.sqlite3")
        reports = [evaluate_model(model, data, ledger, mandate, rounds=rounds) for model in _names(models)]
        ledger.close()
    sizes = {model: installed_mb(PACKAGES[model]) for model in _names(models)}
    command = f"interlock bench purpose --models {models} --rounds {rounds}"
    text = render(reports, data, command=command, chosen_model=DEFAULT_MODEL, package_mb=sizes)
    click.echo(text)
    if not no_write:
        write_section("purpose", text, results)
        click.echo(f"wrote the purpose section of {results}")


@bench_group.command("agentdojo")
@click.option("--mode", "modes", multiple=True, type=click.Choice(["ground_truth", "hijacked", "model"]),
              help="ground_truth: AgentDojo's ground-truth agent, no injections; hijacked: the fully hijacked agent "
              "over every (user task, injection task) pair; model: SmolLM2-135M through AgentDojo's own pipeline, "
              "attacked with important_instructions over every pair (`make bench-model` installs the model; about "
              "12 h or more, one CPU a route; resumable with --work; writes its own section); repeatable (default: "
              "ground_truth and hijacked)")
@click.option("--route", "routes", multiple=True, type=click.Choice(["direct", "interlock"]),
              help="direct (AgentDojo's bank) or through Interlock (each route --approve-policy and --free-text "
              "name); repeatable (default: both). A section needs both.")
@click.option("--user-task", "user_tasks", multiple=True, help="e.g. user_task_0; repeatable (default: all 16)")
@click.option("--injection-task", "injection_tasks", multiple=True,
              help="e.g. injection_task_4; repeatable (default: all 9)")  # fmt: skip
@click.option("--approve-policy", "approve_policies", multiple=True,
              type=click.Choice(["never", "user-request", "user-request-terms"]),
              help="who decides a payout to a payee never paid: never (payee approval off: refused), user-request "
              "(held; a stated policy standing in for the account holder approves a payee the user's request names "
              "or points to, rejects any other) or user-request-terms (as user-request, and only when the same "
              "request or file also writes out the call's amount); repeatable, each a through-Interlock route of its "
              "own (default: all three)")
@click.option("--free-text", "free_texts", multiple=True, type=click.Choice(["off", "bounded"]),
              help="the text sent with a payout: off (the mandate bounds none) or bounded (a payee never paid gets no "
              "narration, ADR 0035); repeatable, crossed with --approve-policy (default: every policy with off, "
              "and user-request with bounded)")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path),
              help="data directory (default: a temp dir); the model mode resumes what it holds")  # fmt: skip
@click.option("--results", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True)
@click.option("--no-write", is_flag=True, help="print the section; leave RESULTS.md alone")
def agentdojo_command(modes: tuple[str, ...], routes: tuple[str, ...], user_tasks: tuple[str, ...],
                      injection_tasks: tuple[str, ...], approve_policies: tuple[str, ...], free_texts: tuple[str, ...],
                      work: Path | None, results: Path, no_write: bool) -> None:  # fmt: skip
    """AgentDojo's banking suite (v1.2.2), scored by AgentDojo's own checks, direct (AgentDojo's bank) and through
    Interlock (every money call a create_payout at a real stack's ingress); writes the `agentdojo-banking` section
    of RESULTS.md and prints its one line. Needs .venv-agentdojo (`make agentdojo`)."""
    from bench.dojo_approver import POLICIES
    from bench.dojo_bridge import RunnerError, route_name, run
    from bench.dojo_report import Scores, render

    base = work or Path(tempfile.mkdtemp(prefix="interlock-agentdojo-"))
    commit = commit_id()  # the code measured: taken before the run, which may outlast edits to the tree
    # SIGTERM unwinds like Ctrl-C, so every stack, model server and runner this run started is stopped by pid.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    commits = [commit]
    if "model" in modes:
        # A resumed pass is measured by every commit that ran part of it: each invocation adds its own, first thing.
        measured_by = base / "model" / "commits"
        measured_by.parent.mkdir(parents=True, exist_ok=True)
        earlier = measured_by.read_text(encoding="utf-8").split() if measured_by.exists() else []
        commits = list(dict.fromkeys([*earlier, commit]))
        measured_by.write_text("".join(c + "\n" for c in commits), encoding="utf-8")
    started = time.monotonic()
    scores: dict[tuple[str, str], Scores] = {}
    raws: dict[str, object] = {}
    if approve_policies or free_texts:
        through = [(p, t) for p in approve_policies or POLICIES for t in free_texts or ("off",)]
    elif modes == ("model",):
        through = [("user-request", "bounded")]  # the model's hours a route: the whole configuration only
    else:
        through = [(p, "off") for p in POLICIES] + [("user-request", "bounded")]
    wanted = [("direct", "never", "off")] + [("interlock", p, t) for p, t in through]
    for mode in modes or ("ground_truth", "hijacked"):
        for route, policy, text in [r for r in wanted if r[0] in (routes or ("direct", "interlock"))]:
            route = route_name(route, policy, text)
            try:
                raw = run(mode, route, base / mode / route, user_tasks=list(user_tasks) or None,
                          injection_tasks=list(injection_tasks) or None, approve_policy=policy,
                          free_text=text, resume=mode == "model" and work is not None)  # fmt: skip
            except RunnerError as exc:
                raise click.ClickException(str(exc)) from exc
            scores[(mode, route)], raws[f"{mode}/{route}"] = Scores.load(raw), raw
            click.echo(f"{mode:<13} {route:<22} utility {sum(scores[(mode, route)].utility.values())}/"
                       f"{len(scores[(mode, route)].utility)}  {time.monotonic() - started:.0f}s")  # fmt: skip
    (base / "scores.json").write_text(json.dumps(raws, indent=1))
    options = [("--route", routes), ("--user-task", user_tasks), ("--injection-task", injection_tasks),
               ("--approve-policy", approve_policies), ("--free-text", free_texts)]
    subset = bool(user_tasks or injection_tasks or routes)
    model = {route: s for (mode, route), s in scores.items() if mode == "model"}
    if model:
        from bench.dojo_report import render_model

        command = "interlock bench agentdojo --mode model" + "".join(f" {flag} {v}" for flag, values in options
                                                                     for v in values)  # fmt: skip
        text = render_model(model, command=command, commit=", ".join(commits))
        _publish("agentdojo-banking-model", text, results, no_write or subset)
        scores = {key: s for key, s in scores.items() if key[0] != "model"}
        if not scores:
            if work is None:
                shutil.rmtree(base, ignore_errors=True)
            return
    direct_and_through = {route == "direct" for _, route in scores} == {True, False}
    if {mode for mode, _ in scores} != {"ground_truth", "hijacked"} or not direct_and_through:
        click.echo("both modes on both routes are needed for the section; printed the scores only")
        return
    command = "interlock bench agentdojo" + "".join(f" {flag} {v}" for flag, values in options for v in values)
    text = render(scores, command=command, commit=commit, elapsed_s=time.monotonic() - started)
    if not no_write and not subset:
        _publish("agentdojo-banking", text, results, no_write)
    else:
        click.echo(text)  # a subset's numbers are not the section's: printed only
    if work is None:
        shutil.rmtree(base, ignore_errors=True)
