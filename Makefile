# Set-up, run and test. `make run ARGS="train.epochs=50"` passes Hydra overrides to `sgt run`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup run test test-slow bench scores lint clean

setup: $(STAMP)

# torch first and pinned, so nothing resolves a CUDA build; then the project in editable mode.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: setup
	$(BIN)/sgt run $(ARGS)

test: setup
	$(BIN)/pytest

test-slow: setup
	$(BIN)/pytest -m slow

# Benchmarks on ../shared/datasets: writes artifacts/bench/results.md and results.csv (hours for all of it;
# narrow it with BENCH_ARGS="--datasets minesweeper --variants spexphormer uniform --seeds 5").
BENCH_ARGS ?=
bench: setup
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

scores: setup
	$(BIN)/sgt scores $(ARGS)

lint: setup
	$(BIN)/ruff check sgt_core flows tests

clean:
	rm -rf artifacts .pytest_cache
