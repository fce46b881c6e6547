# Kondor — HTCondor-style execution points on Kubernetes.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
SRC := core kube operator agent cli devcluster
PKGS := -p kondor_core -p kondor_kube -p kondor_operator -p kondor_agent -p kondor_cli -p kondor_devcluster

.DEFAULT_GOAL := help

##@ General
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development
venv: $(BIN)/kondor ## Create .venv with the project installed editable plus test tools
$(BIN)/kondor: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

fmt: venv ## Format and fix imports
	$(BIN)/ruff format $(SRC) tests bench tools
	$(BIN)/ruff check --fix $(SRC) tests bench tools

lint: venv ## ruff (lint and format check), import-linter layer contracts, function and class sizes
	$(BIN)/ruff check $(SRC) tests bench tools
	$(BIN)/ruff format --check $(SRC) tests bench tools
	$(BIN)/lint-imports
	$(BIN)/python tools/check_sizes.py core agent

typecheck: venv ## mypy --strict with the pydantic plugin
	$(BIN)/mypy $(PKGS)

##@ CRDs
crds: venv ## Generate CRDs from the pydantic models into crds/ and helm/kondor/crds/
	$(BIN)/python tools/gen_crds.py

crds-check: venv ## Fail when the committed CRDs differ from the models
	$(BIN)/python tools/gen_crds.py --check

condor-defaults: venv ## Generate HTCondor's knob defaults from the installed htcondor wheel
	$(BIN)/python tools/gen_condor_defaults.py

condor-defaults-check: venv ## Fail when the committed knob defaults differ from HTCondor's
	$(BIN)/python tools/gen_condor_defaults.py --check

##@ Tests
# Workers for `make test`: the integration modules mostly wait on their clusters, so more
# workers than cores pay (TEST_WORKERS=4: 8.5-15 min against 19.5 serially on 2 cores);
# 0 runs serially, in one process, until two green runs with 4 have been seen.
TEST_WORKERS ?= 0
test: venv controlplane helm image apptainer ## Unit and integration tests, TEST_WORKERS at a time (builds the control plane, the image and Apptainer, fetches helm; cached)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Workers for `make unit` (pytest-xdist): three on the two cores CI and the dev machine have,
# since many unit tests wait on real processes (supervisors, hooks, Apptainer) rather than
# compute: 54-66 s over five runs against 66 s with two and 61 s with four, on an idle
# 2-core machine (this VM's runs vary by 10 s). The
# bytecode cache is kept even where PYTHONDONTWRITEBYTECODE is set: without it each worker
# compiles every module and re-rewrites every test module's asserts (about 5 s a run).
UNIT_WORKERS ?= 3
unit: venv ## Unit tests only (no control plane needed), UNIT_WORKERS at a time
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -n $(UNIT_WORKERS) tests/unit

FUZZ_EXAMPLES ?= 20000
fuzz: venv ## Fuzz every parser and the admission webhook's validation (~10 min; issue 18)
	KONDOR_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/unit/hostile/test_fuzz.py \
	    -p no:cacheprovider -o timeout=900 --hypothesis-show-statistics

check: lint typecheck crds-check condor-defaults-check chart-lint test ## Everything CI runs

bench: venv ## Benchmarks with their baselines
	$(BIN)/python bench/bench_carving.py
	$(BIN)/python bench/bench_policy.py

bench-devcluster: controlplane ## The dev cluster's ceiling: start-up, patch rate, 1,000 kwok nodes
	$(BIN)/python bench/bench_devcluster.py

bench-fleet: controlplane ## 1,000 nodes: API writes at steady state and after a policy change (~10 min)
	$(BIN)/python bench/bench_fleet.py

.PHONY: help venv fmt lint typecheck crds crds-check condor-defaults condor-defaults-check test unit check
bench-scale: controlplane ## Kondor beside kube-scheduler and Kueue: 10,000 jobs on 1,000 kwok nodes (builds Kueue once)
	@$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python bench/bench_scale.py

.PHONY: bench bench-devcluster bench-fleet bench-scale

##@ Development cluster
controlplane: venv ## Build the control plane and kwok, and prepare the real node (kubelet, containerd; cached)
	$(BIN)/python -m kondor_devcluster.build --real-node

apptainer: venv ## Build Apptainer 1.5.3 from its Go module into ~/.cache/kondor/apptainer (root for apt-get; cached; a host that cannot is reported, not failed)
	$(BIN)/python -m kondor_devcluster.apptainer

dev-cluster: controlplane ## Run a dev cluster in the foreground (KUBECONFIG=.devcluster/kubeconfig)
	$(BIN)/kondor dev-cluster up --port 16443 --kubeconfig .devcluster/kubeconfig \
	    --state-dir .devcluster/state \
	    --nodes examples/machines/kwok-small.yaml examples/machines/kwok-gpu.yaml \
	    --operator --agents
.PHONY: controlplane apptainer dev-cluster

##@ Packaging
helm: venv ## Fetch the pinned helm v3.17.2 into ~/.cache/kondor/helm (once)
	$(BIN)/python tools/fetch_helm.py

chart-lint: helm ## helm lint --strict and helm template --include-crds
	h=$$($(BIN)/python tools/fetch_helm.py) && $$h lint --strict helm/kondor && \
	    $$h template kondor helm/kondor --include-crds > /dev/null

image: venv ## Build the image kondor:0.1.0 from the Dockerfile with buildah, no Docker (root; cached): ~/.cache/kondor/image/kondor-0.1.0.oci.tar
	$(BIN)/python tools/build_image.py

kind-up: image helm ## kind cluster from kind-config.yaml, image loaded, chart installed (Docker, kind)
	kind create cluster --config kind-config.yaml
	kind load image-archive "$$($(BIN)/python tools/build_image.py)" --name kondor
	$$($(BIN)/python tools/fetch_helm.py) upgrade --install kondor helm/kondor -n kondor-system \
	    --create-namespace --set image.pullPolicy=Never --wait

e2e: venv ## e2e on kind (opt-in; skipped with a reason without Docker/kind)
	$(BIN)/pytest tests/e2e --e2e
.PHONY: helm chart-lint image kind-up e2e

##@ Demo
demo: controlplane ## The demo: dev cluster with operator and agents, 3 nodes, SlotPolicies, condor_status
	BIN=$(BIN) examples/demo/run.sh

demo-real: controlplane ## The demo plus a real node (containerd, runc, kubelet; root): a pod job runs for real
	BIN=$(BIN) REAL_NODE=kondor-real-0 examples/demo/run.sh

demo-down: venv ## Stop the demo's dev cluster
	$(BIN)/kondor dev-cluster down --state-dir .devcluster/demo/state

demo-helm: controlplane image helm ## The product as users install it: `helm install` on a dev cluster with the real node (root), the operator and agent pods from the image, the demo through them
	BIN=$(BIN) examples/demo/helm.sh

demo-helm-down: venv ## Stop demo-helm's dev cluster
	$(BIN)/kondor dev-cluster down --state-dir .devcluster/helm/state

simulate-demo: venv ## Offline: the slots the GPU example policy gives a node, and where two jobs land
	$(BIN)/kondor simulate --machine examples/machines/gpu-mixed.yaml \
	    --policy examples/policies/gpu-split.yaml \
	    --request examples/jobs/train.yaml --request examples/jobs/small.yaml
.PHONY: demo demo-real demo-down demo-helm demo-helm-down simulate-demo
