"""A fresh stack per scenario: redis-server, the sandbox rail, (for proxy scenarios) the sandbox's MCP
front as the upstream, the engine and the HTTP ingress — real processes, stopped by pid. Both modes of
a scenario run against this one sandbox; the ledger and the limits it counts are the scenario's own. The task
mode gets a stack of its own, whose mandate requires task binding."""

from __future__ import annotations

import copy
import json
import logging
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import redis
import yaml

from bench.scenario import Scenario
from bench.ticket import binding_required
from deploy.agent_client import SandboxControl
from deploy.stack import Stack, read_json, wait_for
from ingress.tokens import token_sha256
from interlock.mandate import validate_mandate
from interlock.queues import gates_queue, rail_queue, rq_queue
from ledger.db import open_ledger
from rails.upstream_manifest import current_pins

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_MANDATE = REPO / "deploy" / "mandate.example.yaml"
AGENT, TOKEN = "agent_demo", "bench-agent-token-7a6b5c4d3e"
# Short timings so retries, leases and reconciliation play out in seconds (as in the chaos matrix).
TIMINGS = {
    "INTERLOCK_RAIL_TIMEOUT_MS": "1000",
    "INTERLOCK_LEASE_TTL_MS": "2500",
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": "1200",
    "INTERLOCK_RECONCILE_MAX_PASSES": "8",
    "INTERLOCK_OUTCOME_WAIT_MS": "2500",
    "INTERLOCK_UPSTREAM_MANIFEST_TTL_MS": "0",  # G6 judges what the upstream serves at each call
}
# Intent states after which nothing more will happen to the money without a person.
QUIET_STATES = frozenset({"APPLIED", "BLOCKED", "FAILED_TERMINAL", "HELD", "QUARANTINED"})


def mandate_data(changes: dict[str, Any], pins: dict[str, str] | None = None) -> dict[str, Any]:
    """The demo mandate with dotted-path *changes*; with *pins*, provenance pins the upstream's tools."""
    data: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLE_MANDATE.read_text(encoding="utf-8")))
    if pins is not None:
        changes = {**changes, "provenance.server_id": "sandbox-front",
                   "provenance.pinned_manifests": {name: {"sha256": h} for name, h in pins.items()}}  # fmt: skip
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return data


def payee_id(scenario_id: str, name: str) -> str:
    """A fund account id of RazorpayX's shape (fa_ and 14 letters or digits), the same for a scenario's payee in every
    mode: one sandbox per stack, so modes share the payees (each pays from the balance set for it)."""
    return "fa_" + re.sub(r"[^A-Za-z0-9]", "", scenario_id.split("_")[0] + name).upper()[:14].ljust(14, "0")


def contact_id(name: str) -> str:
    return "cont_" + re.sub(r"[^A-Za-z0-9]", "", name)[:14].ljust(14, "0")


def write_mandate(path: Path, data: dict[str, Any]) -> Path:
    mandate = validate_mandate(data, source=str(path))  # a scenario with a bad mandate fails here, loudly
    path.write_text(yaml.safe_dump(mandate.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return path


class ScenarioStack:
    """The processes one scenario runs against; `with ScenarioStack(...) as env:` stops them all."""

    def __init__(self, scenario: Scenario, base: Path, *, extra_env: dict[str, str] | None = None,
                 task_binding: bool = False, mandate_extra: dict[str, Any] | None = None) -> None:  # fmt: skip
        self.scenario = scenario
        # task_binding: the mandate requires a harness-signed task on every money call (the "task" mode).
        self.task_binding = task_binding
        # Changes every mode's mandate gets on top of the scenario's (e.g. G5 on: `bench scenarios --purpose-check`).
        self.mandate_extra = dict(mandate_extra or {})
        self.data = base / (scenario.id + ("-task" if task_binding else ""))
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True)
        self.stack = Stack(self.data, env={**TIMINGS, **(extra_env or {})})
        self.overrides = self.data / "manifest-overrides.json"
        self.front_url: str | None = None
        self.mcp_url = ""
        self.control: SandboxControl | None = None
        self.kill_landed: bool | None = None
        self.merchant_id = ""  # the mandate's, once start() wrote it
        self.mandate: dict[str, Any] = {}  # the mandate data start() wrote
        self.payees = {name: payee_id(scenario.id, name) for name in scenario.payees}  # name -> fund account id

    def start(self) -> ScenarioStack:
        stack, scenario = self.stack, self.scenario
        stack.start_redis()
        sandbox_url = stack.start_sandbox(seed=0)
        self.control = SandboxControl(sandbox_url, stack.env["INTERLOCK_RAIL_KEY_ID"],
                                      stack.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip
        pins = None
        if scenario.proxy:
            self.front_url = self._start_front(sandbox_url)
            pins = current_pins(self.front_url)  # the human's review: pin what the upstream serves now
            stack.env.update({"INTERLOCK_RAIL": "mcp-upstream", "INTERLOCK_UPSTREAM_URL": self.front_url,
                              "INTERLOCK_RAIL_TIMEOUT_MS": "2000"})  # fmt: skip
        changes = {**self._payee_grant(), **scenario.mandate_changes, **self.mandate_extra,
                   **(binding_required() if self.task_binding else {})}  # fmt: skip
        data = mandate_data(changes, pins)
        self.mandate = data
        self.merchant_id = str(data["merchant_id"])  # the audience the harness's ticket names (SPEC §10 v2)
        mandate = write_mandate(self.data / "mandate.yaml", data)
        tokens = self.data / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n", encoding="utf-8")
        stack.env["INTERLOCK_MANDATE"] = str(mandate)
        # The ingress imports the MCP SDK (slow): start it first and let it load while the engine boots.
        self.mcp_url = stack.start_ingress(tokens_file=tokens, wait=False)
        stack.start_engine(kill_at={"rail": scenario.kill} if scenario.kill else None)
        stack.wait_for_ingress()
        return self

    def _payee_grant(self) -> dict[str, Any]:
        """The scenario's payees on the rail (one contact per vendor name), its listed ones on the mandate's list."""
        assert self.control is not None
        if not self.scenario.payees:
            return {}
        contacts: set[str] = set()
        for name, spec in self.scenario.payees.items():
            contact = contact_id(spec.contact)
            seen = contact in contacts
            link = {"contact_id": contact} if seen else {"contact": {"id": contact, "name": spec.contact}}
            self.control.add_fund_account(self.payees[name], account_type=spec.account_type, **link)
            contacts.add(contact)
        listed = [self.payees[name] for name, spec in self.scenario.payees.items() if spec.listed]
        return {"scope.grants.create_payout.payees": {"fund_account_ids": listed}}

    def withdraw_mandate(self, timeout_s: float = 30) -> bool:
        """A person withdraws the payout grant: the mandate rewritten without it and rolled out to the reconciler,
        which cancels what waits queued on the rail. Returns whether nothing of ours is queued any more in time."""
        data = copy.deepcopy(self.mandate)
        data["scope"]["grants"].pop("create_payout", None)
        data.get("idempotency", {}).pop("create_payout", None)
        write_mandate(self.data / "mandate.yaml", data)
        self.stack.restart("reconciler")
        ours = set(self.payees.values())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.control is not None
            queued = [r for r in self.control.entities() if r["kind"] == "payout"
                      and r["entity"]["fund_account_id"] in ours and r["entity"]["status"] == "queued"]  # fmt: skip
            if not queued:
                return True
            time.sleep(0.2)
        return False

    def _start_front(self, sandbox_url: str) -> str:
        ready = self.data / "front.ready.json"
        self.overrides.write_text("{}", encoding="utf-8")
        front = self.stack.start_actor("upstream", ["sandbox", "--mcp", "--port", "0", "--rail-url", sandbox_url,
                                                    "--ready-file", str(ready), "--manifest-overrides",
                                                    str(self.overrides)])  # fmt: skip
        info = wait_for(lambda: read_json(ready), timeout=30, what="the sandbox MCP front", actor=front)
        return str(info["url"])

    def poison(self, descriptions: dict[str, str]) -> None:
        """The manifest-poisoning switch: from the next request on, the upstream serves these descriptions."""
        self.overrides.write_text(json.dumps({t: {"description": d} for t, d in descriptions.items()}),
                                  encoding="utf-8")  # fmt: skip

    def rail_credentials(self) -> tuple[str, str, str]:
        env = self.stack.env
        return env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"], env["INTERLOCK_RAIL_KEY_SECRET"]

    def nanny(self) -> RailWorkerNanny:
        return RailWorkerNanny(self)

    def settle(self, *, gated: bool, timeout_s: float = 60) -> bool:
        """Wait until the rail has no pending apply and (gated) every intent is quiet with empty queues.
        Returns False on timeout — the result is then judged as it stands, and says so."""
        assert self.control is not None
        deadline = time.monotonic() + timeout_s
        stable = 0
        while time.monotonic() < deadline:
            stable = stable + 1 if self._quiet(gated) else 0
            if stable >= 3:
                return True
            time.sleep(0.2)
        return False

    def _quiet(self, gated: bool) -> bool:
        assert self.control is not None
        health = self.control.http.get("/__sandbox/health").json()
        if health["pending_applies"] or health["in_progress"]:
            return False
        if not gated:
            return True
        conn = open_ledger(self.stack.ledger_path, readonly=True)
        try:
            states = {row[0] for row in conn.execute("SELECT DISTINCT state FROM intents")}
        finally:
            conn.close()
        if not states <= QUIET_STATES:
            return False
        client = redis.Redis.from_url(self.stack.redis_url or "", socket_connect_timeout=1)
        try:
            return rq_queue(gates_queue(), client).count + rq_queue(rail_queue(), client).count == 0
        finally:
            client.close()

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        self.stack.kill_all()  # a finished scenario has nothing to shut down cleanly

    def __enter__(self) -> ScenarioStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RailWorkerNanny(threading.Thread):
    """Restarts the rail worker when its failpoint SIGKILLed it (as supervisord would) and notes the kill."""

    def __init__(self, env: ScenarioStack) -> None:
        super().__init__(daemon=True, name="rail-nanny")
        self.env = env
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            actor = self.env.stack.actors["rail"]
            if actor.alive():
                continue
            point = self.env.scenario.kill
            self.env.kill_landed = actor.returncode() == -9 and f"failpoint {point}: SIGKILL" in actor.log()
            logger.info("rail worker died (%s, kill landed: %s); restarting", actor.returncode(), self.env.kill_landed)
            self.env.stack.start_actor("rail", ["rail-worker", "--wait-lease", "30"])

    def __enter__(self) -> RailWorkerNanny:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.join(5)
