# Grid: the two commands a person needs are `make run` and `make test`.
# Both create the virtualenv when it is missing and install what they need.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)
APT_PACKAGES := nats-server prometheus
BENCH_APT_PACKAGES := serf
LINT_PATHS := src tests $(wildcard bench)

.PHONY: run test lint typecheck contracts pytest system-deps bench-deps apt-install venv proto bench clean

run: $(STAMP)
	$(BIN)/grid demo

test: system-deps $(STAMP) lint typecheck contracts pytest

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "python3 -m venv failed: installing Debian's python3-venv"; rm -rf $(VENV); \
	  $(MAKE) --no-print-directory apt-install PACKAGES=python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev]'
	@touch $(STAMP)

# Debian packages the test suite needs (nats-server for the JetStream backbone tests,
# prometheus for promtool, which checks the operator's /metrics).
system-deps:
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES)"

# Debian packages the benchmarks compare against (serf: HashiCorp memberlist).
bench-deps:
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES) $(BENCH_APT_PACKAGES)"

apt-install:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

proto: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/python -m grpc_tools.protoc -I proto --python_out=src/grid/proto_gen \
	  --mypy_out=src/grid/proto_gen $$(find proto -name '*.proto')

bench: bench-deps $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python -P $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .grid .mypy_cache .pytest_cache .ruff_cache
