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

# make run UP_ARGS="--gate-workers 4 --ingress-port 9710" passes options to `interlock up`.
run: install
	$(BIN)/interlock up --demo $(UP_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/python tools/check_gate_lines.py

typecheck: install
	$(BIN)/mypy interlock ledger

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
