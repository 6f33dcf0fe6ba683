# pytest-wedge: every target installs what it needs and is safe to run again.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TOXIPROXY := bin/toxiproxy-server
TOXIPROXY_VERSION := 2.12.0
PYTEST_ARGS ?=

WEDGE_DOCKER_DIR ?= /tmp/pytest-wedge-docker
export WEDGE_DOCKER_DIR

.PHONY: install system-deps scenarios matrix fidelity test unit lint docs bench soak stress real-engine docker-up docker-down clean

# Bytecode for the package too: an editable install leaves none, and where
# PYTHONDONTWRITEBYTECODE is set each stub (and the stub fork server) would compile it again.
install: $(VENV)/.installed $(TOXIPROXY)
	@$(BIN)/python -m compileall -q pytest_wedge >/dev/null

# Headless Chromium renders the HTML timeline in a test (Debian's package; no browser download).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

# Toxiproxy v$(TOXIPROXY_VERSION) through the command pip users have too: built from its Go
# module with `go install` (-X makes /version report the real version) when Go is on PATH,
# otherwise the release binary, checked against its pinned SHA-256.
$(TOXIPROXY): | $(VENV)/.installed
	$(BIN)/pytest-wedge install-toxiproxy --dest bin
	$(TOXIPROXY) -version

# The main job: the scenario catalog on the process runtime, on two pytest-xdist workers (each
# shape comes up on one of them): a scenario mostly waits on its own clocks (overdue thresholds,
# watchdog budgets), not on the CPU. SCENARIO_WORKERS=0: one process.
SCENARIO_WORKERS ?= 2
scenarios: install
	$(BIN)/python -m pytest --wedge-scenarios -q -n $(SCENARIO_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no scenario ran"; exit 1; fi; exit $$rc

# The catalog on every router kind (smg, sglang-router, vllm-router; each pinned router in its
# own cached venv, made on first use): one table, printed and saved as matrix.md and
# matrix.json under .wedge-artifacts/matrix/, and its wall time (matrix_wall_s).
MATRIX_ARGS ?= -n 2
matrix: install
	$(BIN)/python -m bench.matrix -- $(MATRIX_ARGS)

# Stub against engine: every catalog scenario a real engine can run, on the stubs and on real
# vLLM behind vllm-router and smg (one 1P+1D at a time, about 7 GB of RAM); fidelity.md and
# fidelity.json under .wedge-artifacts/fidelity/. Fails on a difference with no explanation.
FIDELITY_ARGS ?=
fidelity: install
	$(BIN)/python -m bench.fidelity $(FIDELITY_ARGS)

# The test suite, with a private dockerd for the docker-runtime tests (started and stopped
# here; WEDGE_DOCKER=0 skips Docker). pytest's exit 5 (nothing collected) is a failure.
# Two xdist workers: most tests wait on servers, not on the CPU (TEST_WORKERS=0: one process).
# The tests that take the machine run after the rest, alone: a real 1P+1D takes both cores of
# a 2-core machine (UCX busy-polls one), and the soak's self-tests hold a 30-agent load for
# minutes; beside them, every timing the other tests rely on stretches. Each file runs in a
# pytest of its own, so the engines (kept up for the session) are gone before the soak starts.
TEST_WORKERS ?= 2
SOLO_TESTS := tests/integration/test_real_vllm.py tests/integration/test_soak.py
test: install system-deps lint
	scripts/docker-daemon.sh run $(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) \
	  $(addprefix --ignore=,$(SOLO_TESTS)) $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no test ran"; exit 1; fi; [ $$rc -eq 0 ] || exit $$rc; \
	for solo in $(SOLO_TESTS); do \
	  $(BIN)/python -m pytest $$solo -q -n 0 $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no test ran in $$solo"; exit 1; fi; [ $$rc -eq 0 ] || exit $$rc; \
	done

# Real vLLM on CPU (the vllm worker kind): the KV transfer behind vllm-router and smg, the seed
# incident, and the leak check of a real-engine session; one 1P+1D at a time (about 7 GB of
# RAM, minutes each). `make test` runs only the vllm-router ones (one bring-up).
real-engine: install
	WEDGE_REAL_VLLM=all $(BIN)/python -m pytest tests/integration/test_real_vllm.py \
	  tests/hardening/test_real_vllm_leaks.py -q -n 0 $(PYTEST_ARGS)

# The unit tests alone: no dockerd, no browser, no network service; about 25 s. One process:
# xdist's start-up costs more than it saves here (35 s with -n 2 on a 2-core machine).
UNIT_WORKERS ?= 0
unit: install
	$(BIN)/python -m pytest tests/unit -q -n $(UNIT_WORKERS) $(PYTEST_ARGS)

docker-up:
	scripts/docker-daemon.sh up

docker-down:
	scripts/docker-daemon.sh down

# The same checks as .pre-commit-config.yaml.
lint: install
	$(BIN)/ruff check pytest_wedge tests bench
	$(BIN)/ruff format --check pytest_wedge tests bench
	$(BIN)/mypy

# The reference pages, rendered from the code; tests/unit/test_reference_docs.py fails when the
# committed ones differ. `python -m` from here renders this checkout's code.
docs: install
	$(BIN)/python -m pytest_wedge.cli reference --out docs/reference

bench: install
	scripts/docker-daemon.sh run $(BIN)/python -m bench

# Endurance: the catalog's faults in turn over one long-lived 1P+1D topology under a steady
# 30-agent load for SOAK_MINUTES (default 20); every process sampled, each series' slope per
# hour with its interval, a failure when one grows beyond its bound (docs/performance.md).
# SOAK_LEAK_EVERY=N plants a slot leak (the self-test: it must fail). SOAK_ROUNDS=K instead
# runs the catalog K times: pass rate and time-to-clear spread per scenario.
SOAK_MINUTES ?= 20
export SOAK_MINUTES SOAK_LEAK_EVERY SOAK_ROUNDS
soak: install
	$(BIN)/python -m bench.soak

# The catalog 5 times under -n 4 with three busy loops, then the suite with one busy loop.
stress: install
	scripts/stress.sh

clean:
	rm -rf $(VENV) bin .wedge-artifacts *.egg-info
