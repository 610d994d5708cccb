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
MPIJOB_CRD_V2BETA1 = $(shell $(GO) list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)/manifests/base/kubeflow.org_mpijobs.yaml
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
test: lint unit envtest ## Run every check: lint, unit tests, and both envtest suites.

.PHONY: unit
unit: ## Run the unit tests.
	$(GO) test ./cmd/... ./internal/...

.PHONY: envtest
envtest: ## Run the envtest suites (kubeflow.org/v1 and v2beta1), each against its own API server.
	$(ENVTEST_ENV) $(GO) test -count=1 -v ./test/envtest/... 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)'

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
