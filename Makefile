# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	@echo "interlock: installed into $(VENV). The full stack (interlock up) is not built yet:"
	@echo "  built:     ledger + audit chain (interlock audit verify), sandbox rail (interlock sandbox)"
	@echo "  not built: gate workers, rail worker, reconciler, MCP ingress, interlock up / demo"
	@echo "Start the sandbox rail on its own with: $(BIN)/interlock sandbox --port 8700 --data data/sandbox"

lint: install
	$(BIN)/ruff check .
	$(BIN)/python tools/check_gate_lines.py

typecheck: install
	$(BIN)/mypy interlock ledger

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
