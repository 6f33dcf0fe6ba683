# pytest-wedge: every target installs what it needs and is safe to run again.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TOXIPROXY := bin/toxiproxy-server
TOXIPROXY_VERSION := 2.12.0
PYTEST_ARGS ?=

.PHONY: install scenarios test lint bench soak docker-up docker-down clean

install: $(VENV)/.installed $(TOXIPROXY)

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

# Toxiproxy is built from its Go module; -X makes /version report the real version.
$(TOXIPROXY):
	mkdir -p bin/.gobin
	GOBIN=$(CURDIR)/bin/.gobin GOFLAGS=-mod=mod go install \
	  -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=$(TOXIPROXY_VERSION)" \
	  github.com/Shopify/toxiproxy/v2/cmd/server@v$(TOXIPROXY_VERSION)
	mv bin/.gobin/server $(TOXIPROXY)
	$(TOXIPROXY) -version

# The main job: the scenario catalog on the process runtime.
scenarios: install
	$(BIN)/python -m pytest --wedge-scenarios -p no:randomly -q $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no scenario ran"; exit 1; fi; exit $$rc

# The test suite. pytest's exit 5 (nothing collected) is a failure, not a pass.
test: install lint
	$(BIN)/python -m pytest tests -q $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "no test ran"; exit 1; fi; exit $$rc

lint: install
	$(BIN)/ruff check pytest_wedge tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) bin .wedge-artifacts *.egg-info
