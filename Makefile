# flyte-mpi-webhook: a mutating admission webhook that makes Flyte's MPI and
# Horovod workers run their worker command. `make help` lists the targets.

# Image URL to use for building, pushing and deploying the image.
IMG ?= flyte-mpi-webhook:latest
# Kubernetes version of the envtest API server (kube-apiserver and etcd).
ENVTEST_K8S_VERSION ?= 1.37.2
# The training-operator whose kubeflow.org/v1 MPIJob CRD the v1 suite installs.
TRAINING_OPERATOR_VERSION ?= v1.8.1

GO ?= go
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# The MPIJob CRDs come from the module cache, never from a copy in this repository.
MPIJOB_CRD_V2BETA1 = $(shell $(GO) mod download github.com/kubeflow/mpi-operator && \
	$(GO) list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)/manifests/base/kubeflow.org_mpijobs.yaml
MPIJOB_CRD_V1 = $(shell $(GO) mod download github.com/kubeflow/training-operator@$(TRAINING_OPERATOR_VERSION) && \
	$(GO) list -m -f '{{.Dir}}' github.com/kubeflow/training-operator@$(TRAINING_OPERATOR_VERSION))/manifests/base/crds/kubeflow.org_mpijobs.yaml
# kube-apiserver and etcd: $KUBEBUILDER_ASSETS, setup-envtest's cache, setup-envtest, or a build (hack/envtest-assets.sh).
ENVTEST_ASSETS = $(shell ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) hack/envtest-assets.sh)
ENVTEST_ENV = KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" MPIJOB_CRD_V1="$(MPIJOB_CRD_V1)" MPIJOB_CRD_V2BETA1="$(MPIJOB_CRD_V2BETA1)"

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Quickstart

.PHONY: demo
demo: ## Watch the webhook fix Flyte Horovod jobs on a local API server (no cluster, no Docker).
	@$(ENVTEST_ENV) $(GO) run ./hack/demo

##@ Development

.PHONY: fmt
fmt: ## Format the code with gofmt.
	gofmt -w -s cmd internal test hack

.PHONY: lint
lint: ## Check formatting (gofmt) and run go vet.
	@unformatted=$$(gofmt -l -s cmd internal test hack); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt -s would change: $$unformatted (run make fmt)"; exit 1; fi
	$(GO) vet ./...

.PHONY: test
test: lint unit fuzz-smoke envtest ## Run every check: lint, unit tests, a few seconds of each fuzz target, and both envtest suites.

.PHONY: unit
unit: ## Run the unit tests.
	$(GO) test ./cmd/... ./internal/...

.PHONY: envtest
envtest: ## Run the envtest suites (kubeflow.org/v1 and v2beta1), each against its own API server.
	$(ENVTEST_ENV) $(GO) test -count=1 -v ./test/envtest/... 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)'

# The fuzz targets, as package:Target.
FUZZ_TARGETS = internal/mutate:FuzzDecodeTaskCustom internal/mutate:FuzzDecide internal/mutate:FuzzWords internal/admission:FuzzServeHTTP
FUZZTIME ?= 1m
# Go minimises every new interesting input, for up to 60 s by default, and an
# AdmissionReview of several KB takes that long, during which the worker
# fuzzes nothing: 10 tries each keeps the workers fuzzing.
FUZZMINIMIZETIME ?= 10x

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m); seeds are in each package's testdata/fuzz.
	@for target in $(FUZZ_TARGETS); do \
		echo "fuzz: $${target#*:} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${target#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$${target%%:*} 2>&1 | tail -n 3; \
	done

.PHONY: fuzz-smoke
fuzz-smoke: ## Run each fuzz target for a few seconds, as make test does.
	@$(MAKE) --no-print-directory fuzz FUZZTIME=5s

SOAK_DURATION ?= 60s
SOAK_RATE ?= 500

.PHONY: soak
soak: build ## Hold SOAK_RATE (500) requests/s for SOAK_DURATION (60s), replacing the certificate every 20 s: fails on any error.
	$(GO) run ./hack/load -compare=false -rounds 1 -warmup 0 -max-duration 0 -duration $(SOAK_DURATION) \
		-rate $(SOAK_RATE) -rss-every 5s -rotate-every 20s

.PHONY: golden
golden: ## Rewrite the golden files (docs/hostile-inputs.md) from what the code answers now.
	UPDATE_GOLDEN=1 $(GO) test -count=1 -run TestHostileInputs ./internal/admission

.PHONY: envtest-assets
envtest-assets: ## Obtain kube-apiserver and etcd for envtest, and print where they are.
	@echo $(ENVTEST_ASSETS)

##@ Build

.PHONY: build
build: ## Build bin/webhook.
	$(GO) build -o bin/webhook ./cmd/webhook

.PHONY: run
run: build bin/certs/tls.crt ## Run the webhook locally, with a self-signed certificate from bin/certs.
	bin/webhook --cert-dir bin/certs --zap-devel

bin/certs/tls.crt:
	@mkdir -p bin/certs
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=localhost" \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout bin/certs/tls.key -out bin/certs/tls.crt

##@ End to end

.PHONY: test-e2e
test-e2e: ## Run the real MPI operators against the webhook, and check the worker Pods they create.
	operators=$$(MPI_OPERATOR_VERSION=$$($(GO) list -m -f '{{.Version}}' github.com/kubeflow/mpi-operator) \
		TRAINING_OPERATOR_VERSION=$(TRAINING_OPERATOR_VERSION) hack/e2e-operators.sh) && \
	env $$operators $(ENVTEST_ENV) $(GO) test -count=1 -v ./test/e2e/... 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)'

##@ Deployment

# The tool that builds and pushes the image: docker, or podman.
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl
# undeploy: ignore-not-found=true ignores the objects that are gone already.
ignore-not-found ?= false

# hack/render renders config/default with the kustomize Go API, the image set
# as `kustomize edit set image controller=$(IMG)` would, and edits no file:
# no kustomize binary needed.

.PHONY: docker-build
docker-build: ## Build the image IMG.
	$(CONTAINER_TOOL) build -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: deploy
deploy: ## Install config/default, with image IMG, into the cluster of the current kubectl context.
	$(GO) run ./hack/render -image $(IMG) | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: ## Remove config/default from the cluster of the current kubectl context.
	$(GO) run ./hack/render | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: build-installer
build-installer: ## Write dist/install.yaml: config/default, with image IMG, as one file to kubectl apply -f.
	$(GO) run ./hack/render -image $(IMG) -o dist/install.yaml

##@ Performance

# Where make bench writes each benchmark's full output.
BENCH_DIR ?= bin/bench
# Runs of the in-process benchmark; the table compares medians.
BENCH_COUNT ?= 6
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: bench
bench: build bin/noop-webhook bin/benchstat ## Benchmark the webhook against the floor: in process, over TLS, through the API server (docs/PERFORMANCE.md).
	@mkdir -p $(BENCH_DIR)
	@echo "[1/3] in process: go test -bench BenchmarkAdmit, $(BENCH_COUNT) runs > $(BENCH_DIR)/admit.txt"
	@$(GO) test -run '^$$' -bench '^BenchmarkAdmit$$' -benchmem -count $(BENCH_COUNT) ./internal/admission > $(BENCH_DIR)/admit.txt
	@bin/benchstat -row /version -col /path -filter '.unit:(sec/op OR cpu-sec/op OR allocs/op)' $(BENCH_DIR)/admit.txt > $(BENCH_DIR)/admit-benchstat.txt
	@echo "[2/3] over TLS on loopback: hack/load, bin/webhook against bin/noop-webhook > $(BENCH_DIR)/load.txt"
	@$(GO) run ./hack/load -webhook-bin bin/webhook -noop-bin bin/noop-webhook -rows $(BENCH_DIR)/load.json > $(BENCH_DIR)/load.txt
	@echo "[3/3] through the API server: test/envtest/bench > $(BENCH_DIR)/apiserver.txt"
	@$(ENVTEST_ENV) $(GO) run ./test/envtest/bench -rows $(BENCH_DIR)/apiserver.json > $(BENCH_DIR)/apiserver.txt
	@echo
	@$(GO) run ./hack/benchtable -admit $(BENCH_DIR)/admit.txt $(BENCH_DIR)/load.json $(BENCH_DIR)/apiserver.json

.PHONY: bin/noop-webhook
bin/noop-webhook: ## Build bin/noop-webhook, the reference make bench drives beside bin/webhook.
	$(GO) build -o bin/noop-webhook ./hack/noop-webhook

bin/benchstat:
	GOBIN=$(CURDIR)/bin $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)
