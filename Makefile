# flyte-mpi-webhook: a mutating admission webhook that makes Flyte's MPI and
# Horovod workers run their worker command. `make help` lists the targets.

# The image deploy and build-installer set in config/: no default, so that
# nothing is deployed with an image nobody built (make image writes one).
IMG ?=
# The repository the image is published to; make image and make release name it so.
IMAGE_REPOSITORY ?= ghcr.io/flyteorg/flyte-mpi-webhook
# The version the binary reports and the image's tag: make release sets it.
VERSION ?= dev
# The commit the build is from, -dirty when the work tree has changes, and
# its time, which every file and the config of the image carry.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
VERSION_PACKAGE = github.com/flyteorg/flyte-mpi-webhook/internal/version
# hack/image builds the image's binaries with these flags too (a test holds
# them, and the Dockerfile's, equal).
LDFLAGS = -s -w -X $(VERSION_PACKAGE).Version=$(VERSION) -X $(VERSION_PACKAGE).Revision=$(REVISION)
# Kubernetes version of the envtest API server (kube-apiserver and etcd).
ENVTEST_K8S_VERSION ?= 1.37.2
# The training-operator whose kubeflow.org/v1 MPIJob CRD the v1 suite installs.
TRAINING_OPERATOR_VERSION ?= v1.8.1
# The newest training-operator that serves kubeflow.org/v1 MPIJobs, which
# make test-e2e runs beside TRAINING_OPERATOR_VERSION, with its own CRD.
TRAINING_OPERATOR_V1_9_VERSION ?= v1.9.4

GO ?= go
# Every Go build and test that make runs compiles as the image's webhook does
# (hack/image): static and -trimpath. The tests run the code that ships, and
# one compile of each package serves the tests and the image. make unit's
# race detector needs cgo and sets it. (The Kubernetes binaries are static
# too: hack/envtest-assets.sh, hack/cluster/build.sh.)
export CGO_ENABLED ?= 0
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(GOFLAGS)))
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

# The MPIJob CRDs come from the module cache, never from a copy in this repository.
MPIJOB_CRD_V2BETA1 = $(shell $(GO) mod download github.com/kubeflow/mpi-operator && \
	$(GO) list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)/manifests/base/kubeflow.org_mpijobs.yaml
MPIJOB_CRD_V1 = $(shell $(GO) mod download github.com/kubeflow/training-operator@$(TRAINING_OPERATOR_VERSION) && \
	$(GO) list -m -f '{{.Dir}}' github.com/kubeflow/training-operator@$(TRAINING_OPERATOR_VERSION))/manifests/base/crds/kubeflow.org_mpijobs.yaml
# v1.9's CRD, from the module that builds its controller (hack/e2e/training-operator-v1.9).
MPIJOB_CRD_V1_9 = $(shell $(GO) -C hack/e2e/training-operator-v1.9 mod download github.com/kubeflow/training-operator && \
	$(GO) -C hack/e2e/training-operator-v1.9 list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)/manifests/base/crds/kubeflow.org_mpijobs.yaml
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
demo: kustomize ## Watch the webhook fix the MPIJobs Flyte builds, on a local API server (no cluster, no Docker).
	@$(ENVTEST_ENV) $(GO) run ./test/demo

##@ Development

.PHONY: fmt
fmt: golangci-lint ## Format the code: gofmt, and goimports with this module's imports last (.golangci.yml).
	$(GOLANGCI_LINT) fmt

.PHONY: lint
lint: golangci-lint actionlint tidy-check chart-sync-check actions-pin-check dependabot-check ## Run golangci-lint (.golangci.yml: go vet, staticcheck, revive, ... and the formatters), actionlint on .github/workflows, make tidy-check, make chart-sync-check, make actions-pin-check and make dependabot-check.
	$(GOLANGCI_LINT) run
	$(ACTIONLINT)

.PHONY: actions-pin-check
actions-pin-check: actionlint ## Fail, naming the line, when a uses: in .github/workflows is not OWNER/REPO@<40-hex commit> # vX.Y.Z (docs/RELEASE.md); run actionlint on the inputs passed to each.
	@# A tag can be moved to other code; a commit cannot. The comment names the release.
	@unpinned=$$(grep -rnE --include='*.yml' --include='*.yaml' '^[[:space:]]*(-[[:space:]]+)?uses:' .github/workflows | \
		grep -vE 'uses: [^@ ]+@[0-9a-f]{40} # v[0-9]+\.[0-9]+\.[0-9]+$$' || true); \
	[ -z "$$unpinned" ] || { echo "$$unpinned" >&2; \
		echo "actions-pin-check: want uses: OWNER/REPO@<40-hex commit> # vX.Y.Z (docs/RELEASE.md)" >&2; exit 1; }
	@# actionlint knows popular actions' inputs by major version (actions/checkout@v5), not
	@# by commit: it checks the inputs again with each pin read as its comment's major version.
	@for workflow in $$(find .github/workflows -name '*.yml' -o -name '*.yaml'); do \
		sed -E 's/@[0-9a-f]{40} # (v[0-9]+)\.[0-9]+\.[0-9]+$$/@\1/' "$$workflow" | $(ACTIONLINT) -stdin-filename "$$workflow" - || exit 1; \
	done

.PHONY: dependabot-check
dependabot-check: ## Fail, naming the module, when a Go module is neither in .github/dependabot.yml's weekly updates nor held at an upstream release in hack/dependabot-check.sh.
	hack/dependabot-check.sh

.PHONY: tidy-check
tidy-check: ## Fail, naming the module and with the diff, when go mod tidy would change any module's go.mod or go.sum (hack/tidy-check.sh).
	hack/tidy-check.sh

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply the fixes it can.
	$(GOLANGCI_LINT) run --fix

.PHONY: test
test: lint unit alerts-check monitoring-check fuzz-smoke envtest ## Run every check: lint, unit tests, promtool's tests of the alerts and the names their queries read (a scrape of the real binaries), a few seconds of each fuzz target, and the envtest suite (both MPIJob versions).

.PHONY: unit
unit: kustomize ## Run the unit tests, the rendered config/ tests (test/manifests), the shared fixtures' (test/fixtures) and those of test/soak's attacks, under the race detector.
	CGO_ENABLED=1 $(GO) test -race ./cmd/... ./internal/... ./test/manifests/... ./test/fixtures/... ./test/soak/...

# The alerts (config/prometheus): promtool from Debian's prometheus package, 2.42, the Prometheus
# that make test-cluster runs them on; hack/apt-install.sh installs it when missing.
PROMTOOL ?= promtool

.PHONY: alerts-check
alerts-check: ## Check the alerts with promtool: config/prometheus/rules.yaml parses and passes its unit tests (rules_test.yaml: each alert fires when it must and is silent when healthy).
	@command -v $(PROMTOOL) >/dev/null || hack/apt-install.sh prometheus
	$(PROMTOOL) check rules config/prometheus/rules.yaml
	cd config/prometheus && $(PROMTOOL) test rules rules_test.yaml

.PHONY: envtest
envtest: kustomize ## Run the envtest suite once per MPIJob version (kubeflow.org/v1, v2beta1), each against its own API server; ENVTEST_ARGS=-ginkgo.label-filter=v1 runs one.
	$(ENVTEST_ENV) $(GO) test -count=1 -v ./test/envtest/ $(ENVTEST_ARGS) 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)'

# Where make monitoring-check writes the families it scraped that the rules and
# the dashboard are about, with their labels and the values seen.
MONITORING_SCRAPE ?= $(CURDIR)/bin/monitoring-scrape.txt
# More flags of test/monitoring: -rules=FILE, -dashboard=FILE (from the repository root), -webhook=BINARY.
MONITORING_ARGS ?=

.PHONY: monitoring-check
monitoring-check: kustomize ## Check every PromQL expression of config/prometheus's rules and config/grafana's dashboard: it parses with Prometheus 2.42's parser, and names only metrics and labels that kube-apiserver and the webhook binary export, scraped after traffic through the API server (test/monitoring); the scrape goes to MONITORING_SCRAPE.
	@mkdir -p $(dir $(MONITORING_SCRAPE))
	$(ENVTEST_ENV) $(GO) -C test/monitoring test -count=1 -v . -args -scrape-out=$(MONITORING_SCRAPE) $(MONITORING_ARGS) 2>&1 | \
		grep -Ev '^(=== RUN|--- PASS|PASS$$)'

# The fuzz targets, as package:Target.
FUZZ_TARGETS = internal/mutate:FuzzDecodeTaskCustom internal/mutate:FuzzDecide internal/mutate:FuzzSplitCommand internal/admission:FuzzServeHTTP
FUZZTIME ?= 1m
# Go minimises every new interesting input, for up to 60 s by default, and an
# AdmissionReview of several KB takes that long, during which the worker
# fuzzes nothing: 10 tries each keeps the workers fuzzing.
FUZZMINIMIZETIME ?= 10x
# make test counts executions instead of seconds: when a time budget ends while
# a worker is still inside a call, go test fails the target with a bare
# "context deadline exceeded" and no failing input (golang/go#75804), which a
# busy CI machine hits. A count has no deadline to race. 20000 is about 2 s of
# FuzzDecodeTaskCustom and 8 s of FuzzServeHTTP on 2 cores.
FUZZ_SMOKE ?= 20000x

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 1m, or a count such as 20000x); seeds are in each package's testdata/fuzz.
	@for target in $(FUZZ_TARGETS); do \
		echo "fuzz: $${target#*:} for $(FUZZTIME)"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$${target#*:}$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./$${target%%:*} 2>&1) \
			|| { echo "$$out"; exit 1; }; \
		echo "$$out" | tail -n 2; \
	done

.PHONY: fuzz-smoke
fuzz-smoke: ## Run each fuzz target for FUZZ_SMOKE executions (20000x), as make test does.
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SMOKE)

# How long each attack of make soak lasts.
SOAK_DURATION ?= 20s
# The attacks make soak runs, comma-separated (go run ./test/soak -h lists them); empty runs all.
SOAK_SCENARIOS ?=
# More flags of test/soak, such as -handshakers=500.
SOAK_ARGS ?=

.PHONY: soak
soak: build ## Run each attack of docs/RELIABILITY.md for SOAK_DURATION (20s), from another loopback address and from the Flyte reviews' own, against a fresh bin/webhook on one core, beside 20 Flyte reviews/s on keep-alive connections and 5/s on new ones; fails when a target is missed. SOAK_SCENARIOS=classic,silent-conns runs some.
	$(GO) run ./test/soak -webhook bin/webhook -duration $(SOAK_DURATION) -scenarios '$(SOAK_SCENARIOS)' $(SOAK_ARGS)

.PHONY: golden
golden: ## Rewrite the golden files (docs/hostile-inputs.md, every answer served over TLS, the splitter's refused lines, docs/UPSTREAM.md's equality table) from what the code answers now.
	UPDATE_GOLDEN=1 $(GO) test -count=1 -run 'TestHostileInputs|TestServedAnswers' ./internal/admission
	UPDATE_GOLDEN=1 $(GO) test -count=1 -run 'TestSplitCommandRefused|TestUpstreamEquality' ./internal/mutate

.PHONY: envtest-assets
envtest-assets: ## Obtain kube-apiserver and etcd for envtest, and print where they are.
	@echo $(ENVTEST_ASSETS)

##@ Build

.PHONY: build
build: ## Build bin/webhook, which reports VERSION (default dev) and the commit.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o bin/webhook ./cmd/webhook

# make image's tarball, and REPOSITORY:VERSION@DIGEST in a file beside it.
IMAGE_TAR ?= bin/image/flyte-mpi-webhook-$(VERSION).tar

.PHONY: image
image: ## Build the image IMAGE_REPOSITORY:VERSION for linux/amd64 and linux/arm64 into IMAGE_TAR (bin/image/flyte-mpi-webhook-VERSION.tar), without Docker: docker load, ctr -n k8s.io images import and skopeo read it.
	@mkdir -p $(dir $(IMAGE_TAR))
	$(GO) -C hack/image run . -repo-root "$(CURDIR)" -out "$(abspath $(IMAGE_TAR))" \
		-repository "$(IMAGE_REPOSITORY)" -version "$(VERSION)" -revision "$(REVISION)" -epoch "$(SOURCE_DATE_EPOCH)" \
		> $(IMAGE_TAR:.tar=.ref).tmp
	mv $(IMAGE_TAR:.tar=.ref).tmp $(IMAGE_TAR:.tar=.ref)
	@cat $(IMAGE_TAR:.tar=.ref)

.PHONY: image-check
image-check: image ## Check make image's tarball: nonroot, /webhook, both platforms, no shell, the Dockerfile's flags, a second build's digest the same (hack/image); skopeo reads it; a containerd of its own imports and runs it.
	IMAGE_ARCHIVE="$(abspath $(IMAGE_TAR))" $(GO) -C hack/image test -count=1 ./...
	@command -v skopeo >/dev/null || { echo "image-check: no skopeo; apt-get install -y skopeo containerd" >&2; exit 1; }
	skopeo inspect --raw oci-archive:$(IMAGE_TAR) | grep '"application/vnd.oci.image.index.v1+json"' >/dev/null
	for arch in amd64 arm64; do \
		skopeo --override-os linux --override-arch $$arch inspect --config oci-archive:$(IMAGE_TAR) \
			| grep "\"architecture\": \"$$arch\"" >/dev/null || { echo "skopeo: no linux/$$arch image in $(IMAGE_TAR)" >&2; exit 1; }; \
	done
	skopeo inspect --config docker-archive:$(IMAGE_TAR) | grep '"User": "65532:65532"' >/dev/null
	@# A push keeps the digest make image printed: skopeo copies the index unchanged.
	copy=$$(mktemp -d) && trap 'rm -rf "$$copy"' EXIT && \
	skopeo copy --quiet --all --preserve-digests oci-archive:$(IMAGE_TAR) oci:$$copy/layout:check && \
	grep "$$(sed 's/.*@//' $(IMAGE_TAR:.tar=.ref))" "$$copy/layout/index.json" >/dev/null || \
	{ echo "skopeo copy --all --preserve-digests: not the digest of $(IMAGE_TAR:.tar=.ref)" >&2; exit 1; }
	hack/image/containerd-check.sh $(IMAGE_TAR) $(IMAGE_REPOSITORY):$(VERSION) $(VERSION)

.PHONY: run
run: build bin/certs/tls.crt ## Run the webhook locally, with a self-signed certificate from bin/certs.
	bin/webhook --cert-dir bin/certs --zap-devel

bin/certs/tls.crt:
	@mkdir -p bin/certs
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=localhost" \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout bin/certs/tls.key -out bin/certs/tls.crt

##@ Testdata

.PHONY: testdata
testdata: ## Regenerate testdata/flyte: MPIJobs built by Flyte's own backend, v1.16.8 and each older release, and v1.16.8 with the upstream fix in testdata/flyte/upstream (hack/flyte-testdata).
	hack/flyte-testdata.sh generate testdata/flyte

.PHONY: testdata-check
testdata-check: ## Fail, with a diff, when testdata/flyte is not what each Flyte release's backend (hack/flyte-testdata) generates.
	hack/flyte-testdata.sh check testdata/flyte

##@ Chart

# The Helm chart, and the module of its tests (the Helm 3 and Helm 4 SDKs).
CHART_DIR ?= charts/flyte-mpi-webhook

.PHONY: test-chart
test-chart: kustomize chart-docs-check chart-sync-check ## Test the Helm chart: helm lint --strict, renderings, the same objects as config/, and install, upgrade, helm test, uninstall with Helm 3 and 4 into envtest.
	$(ENVTEST_ENV) $(GO) -C test/helm test -count=1 -timeout 30m ./... $(TEST_CHART_ARGS)

# The Kubernetes versions make test-versions runs: the newest patch of each minor from 1.32 on
# (hack/envtest/releases holds a module for each but the newest, hack/envtest's).
TEST_VERSIONS ?= 1.32.13 1.33.13 1.34.4 1.35.4 1.36.3 1.37.2

.PHONY: prebuild
prebuild: ## Compile, running nothing, what make test-chart, make test-versions and make test-e2e build: kube-apiserver of each of TEST_VERSIONS, the tests' Flyte backend, the image's, the chart's and the end-to-end tests' packages. CI runs it beside make test-cluster.
	for version in $(TEST_VERSIONS); do ENVTEST_K8S_VERSION=$$version hack/envtest-assets.sh >/dev/null; done
	hack/flyte-testdata.sh backend >/dev/null
	$(GO) -C hack/image vet ./...
	$(GO) -C test/helm vet ./...
	$(GO) vet ./test/e2e/...

.PHONY: test-versions
test-versions: kustomize ## Run the envtest suite and the chart's install, upgrade, uninstall against kube-apiserver of each Kubernetes version in TEST_VERSIONS (1.32 to 1.37); print one table (docs/COMPATIBILITY.md).
	MPIJOB_CRD_V1="$(MPIJOB_CRD_V1)" MPIJOB_CRD_V2BETA1="$(MPIJOB_CRD_V2BETA1)" TEST_VERSIONS="$(TEST_VERSIONS)" GO="$(GO)" hack/test-versions.sh

.PHONY: chart-sync
chart-sync: ## Copy the admission policies' CEL, and the webhook's matchConditions beside them, from config/ into the chart's files/policy, which its templates read.
	hack/chart-sync.sh

.PHONY: chart-sync-check
chart-sync-check: ## Fail, with a diff, when the chart's files/policy is not what make chart-sync writes from config/.
	hack/chart-sync.sh --check

.PHONY: chart-docs
chart-docs: helm-docs ## Write the chart's README.md from README.md.gotmpl and the comments in values.yaml.
	$(HELM_DOCS) --chart-search-root $(dir $(CHART_DIR)) --template-files README.md.gotmpl

.PHONY: chart-docs-check
chart-docs-check: helm-docs ## Fail, with a diff, when the chart's README.md is not what make chart-docs writes.
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -r $(CHART_DIR) "$$tmp/" && \
	$(HELM_DOCS) --log-level warning --chart-search-root "$$tmp" --template-files README.md.gotmpl && \
	diff -u $(CHART_DIR)/README.md "$$tmp/$(notdir $(CHART_DIR))/README.md" || \
	{ echo "$(CHART_DIR)/README.md is stale: run make chart-docs"; exit 1; }

##@ End to end

.PHONY: test-e2e
test-e2e: kustomize ## Run Flyte's backend and the real MPI operators (training-operator v1.8 and v1.9) against the webhook on the jobs Flyte builds (testdata/flyte).
	operators=$$(MPI_OPERATOR_VERSION=$$($(GO) list -m -f '{{.Version}}' github.com/kubeflow/mpi-operator) \
		TRAINING_OPERATOR_VERSION=$(TRAINING_OPERATOR_VERSION) \
		TRAINING_OPERATOR_V1_9_VERSION=$(TRAINING_OPERATOR_V1_9_VERSION) hack/e2e-operators.sh) && \
	flyte=$$(hack/flyte-testdata.sh backend) && \
	export $$operators $$flyte && \
	env $(ENVTEST_ENV) TRAINING_OPERATOR_VERSION=$(TRAINING_OPERATOR_VERSION) \
		$(GO) test -count=1 -v ./test/e2e/... 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)' && \
	env $(ENVTEST_ENV) MPIJOB_CRD_V1="$(MPIJOB_CRD_V1_9)" TRAINING_OPERATOR_VERSION=$(TRAINING_OPERATOR_V1_9_VERSION) \
		TRAINING_OPERATOR_BIN="$$TRAINING_OPERATOR_V1_9_BIN" \
		$(GO) test -count=1 -v ./test/e2e/trainingoperator 2>&1 | grep -Ev '^(=== RUN|--- PASS|PASS$$)'

##@ Real cluster

# What make test-cluster passes to the suite (test/cluster), e.g. -ginkgo.focus=Succeeded; the timing spec
# (docs/UPSTREAM.md, "What a Flyte user waits") runs only when asked: -ginkgo.label-filter=timing.
TEST_CLUSTER_ARGS ?=
# What make test-cluster runs on the cluster, in its network namespace: the suite, or e.g. bash, a shell
# with the cluster's KUBECONFIG and every part's variable (docs/CLUSTER.md); the cluster goes when it ends.
TEST_CLUSTER_CMD ?= bin/cluster.test -test.v -ginkgo.v -ginkgo.no-color $(TEST_CLUSTER_ARGS)
# The Debian packages of the cluster's node and its registry, which make test-cluster installs when missing.
TEST_CLUSTER_PACKAGES = containerd runc containernetworking-plugins debootstrap iproute2 iptables openssl util-linux \
	docker-registry skopeo jq prometheus
# The release make test-cluster makes and installs from the cluster's registry, as a user installs one.
TEST_CLUSTER_VERSION = v0.0.0-cluster
TEST_CLUSTER_DIST = bin/cluster-release
# Where make test-cluster keeps the logs of the cluster's parts (flytepropeller's among them) when it tears it down.
TEST_CLUSTER_LOGS = bin/cluster-logs

.PHONY: test-cluster
test-cluster: helm cosign ## Start a real single-node cluster in a network namespace (test/cluster/cluster.sh) with a registry and the training-operator, run Flyte's MPI and Horovod jobs on it through the launcher's kubectl exec, without the add-on, and with it installed from make release's artifacts as the README says (make publish to the registry, signed with a key the suite generates, verified with the README's commands, which refuse a tampered image or another key; Helm from the registry, one file, kustomize), under training-operator v1.8.1 and v1.9.4, then mpi-operator v0.8.2's kubeflow.org/v2beta1 jobs, whose launcher reaches the workers over SSH, and tear it all down (docs/CLUSTER.md).
	@start=$$SECONDS; t() { echo "test-cluster: $$(date -u +%T) [+$$((SECONDS - start))s] $$*"; }; \
	hack/apt-install.sh $(TEST_CLUSTER_PACKAGES) && t "Debian packages there" && \
	parts=$$(hack/cluster/build.sh) && export $$parts && t "node binaries built" && \
	operators=$$(MPI_OPERATOR_VERSION=$$($(GO) list -m -f '{{.Version}}' github.com/kubeflow/mpi-operator) \
		TRAINING_OPERATOR_VERSION=$(TRAINING_OPERATOR_VERSION) \
		TRAINING_OPERATOR_V1_9_VERSION=$(TRAINING_OPERATOR_V1_9_VERSION) hack/e2e-operators.sh) && export $$operators && \
	flyte=$$(hack/flyte-testdata.sh backend) && export $$flyte && \
	propeller=$$(hack/flyte-testdata.sh propeller) && export $$propeller && \
	patched=$$(hack/flyte-testdata.sh propeller-patched) && export $$patched && \
		t "operators, Flyte's backend and flytepropeller (as published, and with the upstream fix) built" && \
	job=$$(hack/cluster/job-image.sh) && export $$job && t "job image built" && \
	rm -rf $(TEST_CLUSTER_DIST) && \
	$(MAKE) --no-print-directory release VERSION=$(TEST_CLUSTER_VERSION) DIST_DIR=$(TEST_CLUSTER_DIST) && \
		t "release $(TEST_CLUSTER_VERSION) made in $(TEST_CLUSTER_DIST)" && \
	$(GO) test -c -o bin/cluster.test ./test/cluster && t "suite built" && \
	env $(ENVTEST_ENV) MPIJOB_CRD_V1_9="$(MPIJOB_CRD_V1_9)" IMAGE_TARS="$$JOB_IMAGE_TAR $$JOB_ENTRYPOINT_IMAGE_TAR" \
		RELEASE_DIR=$(abspath $(TEST_CLUSTER_DIST)) RELEASE_VERSION=$(TEST_CLUSTER_VERSION) \
		SOURCE_DIR=$(CURDIR) HELM=$(HELM) COSIGN=$(COSIGN) CLUSTER_LOGS=$(abspath $(TEST_CLUSTER_LOGS)) \
		test/cluster/cluster.sh test $(TEST_CLUSTER_CMD) && t "done"

##@ Upstream

.PHONY: upstream-check
upstream-check: ## Apply the fix for Flyte (hack/upstream/flyteplugins-mpi-worker-command.patch) to flyteplugins v1.16.8 as published and run its MPI plugin's own tests: all pass with it, and its new cases fail without its change to mpi.go (docs/UPSTREAM.md).
	hack/upstream/flyteplugins.sh check

##@ Deployment

# The tool that builds and pushes the image: docker, or podman.
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl
# undeploy: ignore-not-found=true ignores the objects that are gone already.
ignore-not-found ?= false
# Which install deploy, undeploy and build-installer take (README, "Install"):
# default (the webhook), policy-only (the admission policies, no server;
# Kubernetes >= 1.36) or default-with-policy (both).
INSTALL ?= default
INSTALLS = default policy-only default-with-policy
ifeq ($(filter $(INSTALL),$(INSTALLS)),)
$(error INSTALL=$(INSTALL) is not one of: $(INSTALLS))
endif
# Where build-installer and release write: dist/ unless told (make test-cluster
# releases into bin/, so that a release in dist/ is never overwritten).
DIST_DIR ?= dist
# build-installer's file: DIST_DIR/install.yaml for the webhook, DIST_DIR/install-INSTALL.yaml for the others.
INSTALLER = $(DIST_DIR)/install$(if $(filter default,$(INSTALL)),,-$(INSTALL)).yaml

# The image config/manager names, NAME:TAG, the newest release (CHANGELOG.md);
# deploy and build-installer replace it with IMG.
IMAGE_IN_CONFIG_REF = $(shell sed -n 's/^ *image: //p' config/manager/manager.yaml)
IMAGE_IN_CONFIG = $(firstword $(subst :, ,$(IMAGE_IN_CONFIG_REF)))
RELEASED_VERSION = $(lastword $(subst :, ,$(IMAGE_IN_CONFIG_REF)))

# need-img stops a target that would install the webhook without IMG, before
# it renders anything: config/ pins the released image, which a cluster
# running a build of this tree does not want by accident.
need-img = $(if $(or $(IMG),$(filter policy-only,$(INSTALL))),,$(error IMG is not set: \
	set IMG to the image the webhook's pods run, such as IMG=$(IMAGE_REPOSITORY):$(VERSION) from make image \
	(bin/image/flyte-mpi-webhook-$(VERSION).tar, loaded into the cluster), or the released one, $(IMAGE_REPOSITORY):$(RELEASED_VERSION)))

# render-install prints config/INSTALL as `kustomize build` does, with the
# image IMG set as `kustomize edit set image` sets it (a no-op for
# policy-only, which runs no image), in an overlay in a temporary directory:
# no file of config/ is edited.
define render-install
overlay=$$(mktemp -d) && trap 'rm -rf "$$overlay"' EXIT && \
	printf 'resources:\n- %s\n' "$$(realpath --relative-to="$$overlay" config/$(INSTALL))" > "$$overlay/kustomization.yaml" && \
	$(if $(IMG),(cd "$$overlay" && $(KUSTOMIZE) edit set image $(IMAGE_IN_CONFIG)=$(IMG)) &&) \
	$(KUSTOMIZE) build "$$overlay"
endef

# admission-first keeps, of a rendered install on standard input, the objects
# that send jobs to the webhook or the policies ($(1) = 1), or the others
# ($(1) = 0). undeploy deletes the first before the second: a binding whose
# parameter (the ConfigMap in the install's namespace) is gone refuses every
# Flyte MPIJob (parameterNotFoundAction: Deny), and so does a webhook
# configuration whose pods are gone (failurePolicy: Fail).
define admission-first
awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } \
	{ admission = ($$0 ~ /(^|\n)kind: (MutatingWebhookConfiguration|MutatingAdmissionPolicyBinding|ValidatingAdmissionPolicyBinding)\n/) } \
	admission == $(1) && NF > 0 { print }'
endef

.PHONY: docker-build
docker-build: ## Build the image IMG with Docker, as make image builds it without.
	$(if $(IMG),,$(error IMG is not set: set IMG to the image to build, such as IMG=$(IMAGE_REPOSITORY):$(VERSION)))
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(if $(IMG),,$(error IMG is not set: set IMG to the image to push))
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: deploy
deploy: kustomize ## Install config/INSTALL (default: the webhook; policy-only; default-with-policy), with image IMG (required but for policy-only), into the cluster of the current kubectl context.
	$(need-img)
	$(render-install) | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: kustomize ## Remove config/INSTALL from the cluster of the current kubectl context: the webhook configuration and the policy bindings first, then the rest.
	rendered=$$(mktemp) && trap 'rm -f "$$rendered"' EXIT && \
	$(KUSTOMIZE) build config/$(INSTALL) > "$$rendered" && \
	$(call admission-first,1) < "$$rendered" | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f - && \
	$(call admission-first,0) < "$$rendered" | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: build-installer
build-installer: kustomize ## Write config/INSTALL, with image IMG (required but for policy-only), as one file to kubectl apply -f: DIST_DIR/install.yaml (default), DIST_DIR/install-INSTALL.yaml (the others), DIST_DIR default dist.
	$(need-img)
	@mkdir -p $(dir $(INSTALLER))
	$(render-install) > $(INSTALLER).tmp
	mv $(INSTALLER).tmp $(INSTALLER)

##@ Release

# A release's version: v, then semver (https://semver.org), no build metadata
# (an image tag has no +).
SEMVER_RE = ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$$
CHART_DIR ?= charts/flyte-mpi-webhook
# What make release writes into DIST_DIR, besides SHA256SUMS.
RELEASE_IMAGE_TAR = $(DIST_DIR)/flyte-mpi-webhook-$(VERSION)-image.tar
RELEASE_CHART = $(DIST_DIR)/flyte-mpi-webhook-$(VERSION:v%=%).tgz
RELEASE_INSTALLERS = $(foreach install,$(INSTALLS),$(DIST_DIR)/install$(if $(filter default,$(install)),,-$(install)).yaml)
# The image's platforms (hack/image builds these two), and the SBOM of each,
# which syft writes from the image's tarball: SPDX 2.3 JSON.
RELEASE_PLATFORMS = linux/amd64 linux/arm64
release-sbom = $(DIST_DIR)/flyte-mpi-webhook-$(VERSION)-$(subst /,-,$(1)).spdx.json
# The SBOM of platform $(1) of the image's tarball, on stdout. syft makes up the
# document's time and namespace on every run and has no option to fix them; jq
# sets them from SOURCE_DATE_EPOCH and the platform's manifest digest
# (hack/syft/reproducible.jq), so that one commit gives the same bytes.
release-sbom-cmd = SYFT_CHECK_FOR_APP_UPDATE=false $(SYFT) scan --quiet --platform $(1) \
	--source-name $(IMAGE_REPOSITORY) --source-version $(VERSION) -o spdx-json oci-archive:$(RELEASE_IMAGE_TAR) | \
	jq -c --arg epoch $(SOURCE_DATE_EPOCH) -f hack/syft/reproducible.jq
RELEASE_SBOMS = $(foreach platform,$(RELEASE_PLATFORMS),$(call release-sbom,$(platform)))
# Every file of a release, which SHA256SUMS covers.
RELEASE_FILES = $(RELEASE_IMAGE_TAR) $(RELEASE_IMAGE_TAR:.tar=.ref) $(RELEASE_SBOMS) $(RELEASE_CHART) $(RELEASE_INSTALLERS)

.PHONY: release
release: kustomize ## Write release VERSION (vX.Y.Z) into DIST_DIR (dist/): the image tarball and its digest, an SPDX SBOM per platform (syft), the chart, the one-file install of each mode with the image pinned to VERSION, and SHA256SUMS of them all.
	@[[ "$(VERSION)" =~ $(SEMVER_RE) ]] || { \
		echo "VERSION=$(VERSION): want a release version, v and then semver without build metadata, such as VERSION=v0.1.0 or VERSION=v0.2.0-rc.1" >&2; exit 1; }
	@[ -f $(CHART_DIR)/Chart.yaml ] || { echo "$(CHART_DIR)/Chart.yaml: no chart to package" >&2; exit 1; }
	$(call our-tool,helm,$(HELM))
	@mkdir -p $(DIST_DIR)
	$(call our-tool,syft,$(SYFT))
	@command -v jq >/dev/null || { echo "release: no jq, which makes the SBOMs reproducible; apt-get install -y jq" >&2; exit 1; }
	$(MAKE) --no-print-directory image VERSION=$(VERSION) IMAGE_TAR=$(RELEASE_IMAGE_TAR)
	@# What the image holds, read from it as a scanner reads it: the Go modules compiled
	@# into /webhook (its build info) with their versions, and the image's layer and digests.
	$(foreach platform,$(RELEASE_PLATFORMS),$(call release-sbom-cmd,$(platform)) > $(call release-sbom,$(platform)) &&) true
	for install in $(INSTALLS); do \
		$(MAKE) --no-print-directory build-installer INSTALL=$$install IMG=$(IMAGE_REPOSITORY):$(VERSION) || exit 1; \
	done
	@# The chart, packaged from a copy whose Chart.yaml carries this release's Artifact Hub
	@# annotations: the image by its digest, CHANGELOG.md's section (hack/helm/annotate.sh).
	chart=$$(mktemp -d) && trap 'rm -rf "$$chart"' EXIT && cp -R $(CHART_DIR) "$$chart/" && \
	hack/helm/annotate.sh "$$chart/$(notdir $(CHART_DIR))/Chart.yaml" $(VERSION) "$$(cat $(RELEASE_IMAGE_TAR:.tar=.ref))" \
		CHANGELOG.md $(RELEASE_PLATFORMS) && \
	$(HELM) package "$$chart/$(notdir $(CHART_DIR))" --version $(VERSION:v%=%) --app-version $(VERSION) --destination $(DIST_DIR)
	@# helm package writes the time it runs as each file's: the commit's in its place.
	hack/helm/reproducible.sh $(RELEASE_CHART) $(SOURCE_DATE_EPOCH)
	cd $(DIST_DIR) && sha256sum $(notdir $(RELEASE_FILES)) > SHA256SUMS
	@cat $(DIST_DIR)/SHA256SUMS

.PHONY: release-sbom-check
release-sbom-check: ## Fail when syft, run again on the image of make release's VERSION in DIST_DIR, writes SBOMs other than the release's, byte for byte.
	@for file in $(RELEASE_IMAGE_TAR) $(RELEASE_SBOMS); do [ -f "$$file" ] || { \
		echo "$$file: no such file: run make release VERSION=$(VERSION) DIST_DIR=$(DIST_DIR) first" >&2; exit 1; }; done
	$(call our-tool,syft,$(SYFT))
	$(foreach platform,$(RELEASE_PLATFORMS),$(call release-sbom-cmd,$(platform)) | cmp - $(call release-sbom,$(platform)) &&) true
	@echo "release-sbom-check: syft wrote the same SBOMs again: $(notdir $(RELEASE_SBOMS))"

# Where make publish pushes a release: the image to REGISTRY/flyte-mpi-webhook,
# the chart to REGISTRY/charts/flyte-mpi-webhook (IMAGE_REPOSITORY's registry
# and namespace unless told).
REGISTRY ?= $(patsubst %/,%,$(dir $(IMAGE_REPOSITORY)))
PUBLISH_IMAGE = $(REGISTRY)/flyte-mpi-webhook
PUBLISH_CHARTS = $(REGISTRY)/charts
# The cosign private key make publish signs with (COSIGN_PASSWORD its
# password); empty, it signs keyless, with the OIDC identity of the machine
# it runs on: the release pipeline's, recorded in the public transparency log.
# A key's signatures are not logged: a private mirror's verifiers hold its key.
COSIGN_KEY ?=
# true: REGISTRY speaks plain HTTP (the tests' registry, on loopback).
PUBLISH_PLAIN_HTTP ?= false
COSIGN_SIGN_FLAGS = --yes $(if $(COSIGN_KEY),--key $(COSIGN_KEY) --use-signing-config=false --tlog-upload=false)
COSIGN_REGISTRY_FLAGS = $(if $(filter true,$(PUBLISH_PLAIN_HTTP)),--allow-http-registry)

.PHONY: publish
publish: ## Push make release's image (skopeo) and chart (helm push) for VERSION from DIST_DIR to REGISTRY, sign both and attest the SBOMs to the image with cosign (COSIGN_KEY, or keyless), sign SHA256SUMS into SHA256SUMS.sigstore.json, and write the digests to published.env.
	@[[ "$(VERSION)" =~ $(SEMVER_RE) ]] || { echo "VERSION=$(VERSION): want the version make release made, such as VERSION=v0.1.0" >&2; exit 1; }
	@for file in $(RELEASE_FILES) $(DIST_DIR)/SHA256SUMS; do [ -f "$$file" ] || { \
		echo "$$file: no such file: run make release VERSION=$(VERSION) DIST_DIR=$(DIST_DIR) first" >&2; exit 1; }; done
	cd $(DIST_DIR) && sha256sum --quiet --check SHA256SUMS
	$(call our-tool,helm,$(HELM))
	$(call our-tool,cosign,$(COSIGN))
	@command -v skopeo >/dev/null || { echo "publish: no skopeo; apt-get install -y skopeo" >&2; exit 1; }
	@# skopeo keeps the index's digest, which make image wrote beside the tarball.
	skopeo copy --quiet --all --preserve-digests $(if $(filter true,$(PUBLISH_PLAIN_HTTP)),--dest-tls-verify=false) \
		oci-archive:$(RELEASE_IMAGE_TAR) docker://$(PUBLISH_IMAGE):$(VERSION)
	@# One shell (-e): each command stops the rest when it fails. helm push writes the chart
	@# archive's time (make release's SOURCE_DATE_EPOCH) as its created, in the local zone: UTC.
	image=$(PUBLISH_IMAGE)@$$(sed 's/.*@//' $(RELEASE_IMAGE_TAR:.tar=.ref)); \
	$(COSIGN) sign $(COSIGN_SIGN_FLAGS) $(COSIGN_REGISTRY_FLAGS) "$$image"; \
	$(foreach sbom,$(RELEASE_SBOMS),$(COSIGN) attest $(COSIGN_SIGN_FLAGS) $(COSIGN_REGISTRY_FLAGS) \
		--type spdxjson --predicate $(sbom) "$$image";) \
	pushed=$$(TZ=UTC $(HELM) push $(RELEASE_CHART) oci://$(PUBLISH_CHARTS) $(if $(filter true,$(PUBLISH_PLAIN_HTTP)),--plain-http) 2>&1) || \
		{ echo "$$pushed" >&2; exit 1; }; \
	echo "$$pushed"; \
	chart=$$(sed -n 's/^Digest: //p' <<< "$$pushed"); \
	[ -n "$$chart" ] || { echo "publish: helm push printed no digest" >&2; exit 1; }; \
	$(COSIGN) sign $(COSIGN_SIGN_FLAGS) $(COSIGN_REGISTRY_FLAGS) $(PUBLISH_CHARTS)/flyte-mpi-webhook@$$chart; \
	$(COSIGN) sign-blob $(COSIGN_SIGN_FLAGS) --bundle $(DIST_DIR)/SHA256SUMS.sigstore.json $(DIST_DIR)/SHA256SUMS; \
	printf 'image=%s\nimage_digest=%s\nchart=%s\nchart_digest=%s\n' $(PUBLISH_IMAGE) "$${image#*@}" \
		$(PUBLISH_CHARTS)/flyte-mpi-webhook "$$chart" > $(DIST_DIR)/published.env
	@cat $(DIST_DIR)/published.env

# The release make release-check makes, publishes to a registry of its own and verifies.
RELEASE_CHECK_VERSION = v0.0.0-check
RELEASE_CHECK_DIST = bin/release-check

.PHONY: release-check
release-check: ## Make a release into bin/release-check, make publish it to a docker-registry of its own on 127.0.0.1, signed with a key pair it generates, check its SBOMs against go list and a second syft run, and run the README's "With a key" verification: it passes, and refuses an image pushed under the tag with another digest, or another key (test/release/check.sh).
	hack/apt-install.sh docker-registry skopeo jq
	rm -rf $(RELEASE_CHECK_DIST)
	$(MAKE) --no-print-directory release VERSION=$(RELEASE_CHECK_VERSION) DIST_DIR=$(RELEASE_CHECK_DIST)
	$(MAKE) --no-print-directory release-sbom-check VERSION=$(RELEASE_CHECK_VERSION) DIST_DIR=$(RELEASE_CHECK_DIST)
	$(call our-tool,cosign,$(COSIGN))
	RELEASE_DIR=$(RELEASE_CHECK_DIST) RELEASE_VERSION=$(RELEASE_CHECK_VERSION) COSIGN=$(COSIGN) HELM=$(HELM) \
		MAKE="$(MAKE)" test/release/check.sh

##@ Performance

# Where make bench writes each step's full output, and the table.
BENCH_DIR ?= $(CURDIR)/bin/bench
# Runs of the in-process benchmark; the table compares medians.
BENCH_COUNT ?= 6

.PHONY: bench
bench: build kustomize benchstat vegeta ## Benchmark the webhook against references, in process, over TLS and through the API server (docs/PERFORMANCE.md).
	@mkdir -p $(BENCH_DIR)
	$(GO) build -o bin/reference-webhook ./test/bench/reference-webhook
	$(GO) test -run '^$$' -bench '^BenchmarkAdmit$$' -benchmem -count $(BENCH_COUNT) ./internal/admission > $(BENCH_DIR)/admit.txt
	$(BENCHSTAT) -row /case -col '/path@(webhook floor)' $(BENCH_DIR)/admit.txt > $(BENCH_DIR)/admit-benchstat.txt
	$(ENVTEST_ENV) BENCH_TABLE=$(BENCH_DIR)/table.txt VEGETA=$(VEGETA) \
		$(GO) test -count=1 -timeout 30m ./test/bench > $(BENCH_DIR)/bench.txt || { cat $(BENCH_DIR)/bench.txt; exit 1; }
	@echo; cat $(BENCH_DIR)/admit-benchstat.txt; echo; cat $(BENCH_DIR)/table.txt

##@ Tools

# Where the tools are built: bin/ of the repository.
LOCALBIN ?= $(CURDIR)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

# The tools, and their versions, which hack/tools/go.mod pins (a module of its
# own, so that none of them is a dependency of the webhook): `go get` there to
# change one.
KUSTOMIZE ?= $(LOCALBIN)/kustomize
# test/manifests runs $KUSTOMIZE to render config/ for the tests.
export KUSTOMIZE
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
BENCHSTAT ?= $(LOCALBIN)/benchstat
VEGETA ?= $(LOCALBIN)/vegeta
tool-version = $(shell $(GO) -C hack/tools list -m -f '{{.Version}}' $(1))
KUSTOMIZE_VERSION ?= $(call tool-version,sigs.k8s.io/kustomize/kustomize/v5)
GOLANGCI_LINT_VERSION ?= $(call tool-version,github.com/golangci/golangci-lint/v2)
BENCHSTAT_VERSION ?= $(call tool-version,golang.org/x/perf)
VEGETA_VERSION ?= $(call tool-version,github.com/tsenart/vegeta/v12)

.PHONY: tools
tools: kustomize golangci-lint benchstat vegeta helm-docs actionlint syft cosign ## Build every tool below into bin/.

.PHONY: kustomize
kustomize: $(LOCALBIN) ## Build bin/kustomize, which renders config/ (deploy, the manifests tests, envtest).
	$(call go-build-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: golangci-lint
golangci-lint: $(LOCALBIN) ## Build bin/golangci-lint, which make lint runs.
	$(call go-build-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: benchstat
benchstat: $(LOCALBIN) ## Build bin/benchstat, which make bench runs on the in-process benchmark.
	$(call go-build-tool,$(BENCHSTAT),golang.org/x/perf/cmd/benchstat,$(BENCHSTAT_VERSION))

.PHONY: vegeta
vegeta: $(LOCALBIN) ## Build bin/vegeta, the load generator of make bench.
	$(call go-build-tool,$(VEGETA),github.com/tsenart/vegeta/v12,$(VEGETA_VERSION))

# The Helm CLI, with which make release packages the chart, and helm-docs,
# which writes the chart's README: each pinned by a module of its own
# (hack/helm, hack/helm-docs), for Helm's many dependencies.
HELM ?= $(LOCALBIN)/helm
HELM_VERSION ?= $(shell $(GO) -C hack/helm list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM_DOCS ?= $(LOCALBIN)/helm-docs
HELM_DOCS_VERSION ?= $(shell $(GO) -C hack/helm-docs list -m -f '{{.Version}}' github.com/norwoodj/helm-docs)

.PHONY: helm
helm: $(LOCALBIN) ## Build bin/helm, with which make release packages the chart.
	$(call go-build-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION),hack/helm)

.PHONY: helm-docs
helm-docs: $(LOCALBIN) ## Build bin/helm-docs, which writes the chart's README (make chart-docs).
	$(call go-build-tool,$(HELM_DOCS),github.com/norwoodj/helm-docs/cmd/helm-docs,$(HELM_DOCS_VERSION),hack/helm-docs)

# syft, which writes the image's SBOM in make release: a module of its own
# (hack/syft), for its catalogers' many dependencies. Its version, which the
# SBOM names as its creator, is set as syft's own release sets it.
SYFT ?= $(LOCALBIN)/syft
SYFT_VERSION ?= $(shell $(GO) -C hack/syft list -m -f '{{.Version}}' github.com/anchore/syft)

.PHONY: syft
syft: $(LOCALBIN) ## Build bin/syft, with which make release writes the image's SBOM.
	$(call go-build-tool,$(SYFT),github.com/anchore/syft/cmd/syft,$(SYFT_VERSION),hack/syft,-ldflags=-X=main.version=$(SYFT_VERSION))

# actionlint, which make lint runs on .github/workflows: a module of its own
# (hack/actionlint), for the go.yaml.in/yaml/v4 release it needs, older than
# the one golangci-lint brings into hack/tools.
ACTIONLINT ?= $(LOCALBIN)/actionlint
ACTIONLINT_VERSION ?= $(shell $(GO) -C hack/actionlint list -m -f '{{.Version}}' github.com/rhysd/actionlint)

.PHONY: actionlint
actionlint: $(LOCALBIN) ## Build bin/actionlint, which make lint runs on the GitHub workflows.
	$(call go-build-tool,$(ACTIONLINT),github.com/rhysd/actionlint/cmd/actionlint,$(ACTIONLINT_VERSION),hack/actionlint,-ldflags=-X=github.com/rhysd/actionlint.version=$(ACTIONLINT_VERSION))

# cosign, with which make publish signs the image and the chart and attests
# the SBOMs: a module of its own (hack/cosign), for the sigstore clients and
# cloud KMS SDKs it brings. Its version, which cosign version prints, is set
# as cosign's own release sets it.
COSIGN ?= $(LOCALBIN)/cosign
COSIGN_VERSION ?= $(shell $(GO) -C hack/cosign list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)

.PHONY: cosign
cosign: $(LOCALBIN) ## Build bin/cosign, with which make publish signs a release and make release-check verifies it.
	$(call go-build-tool,$(COSIGN),github.com/sigstore/cosign/v3/cmd/cosign,$(COSIGN_VERSION),hack/cosign,-ldflags=-X=sigs.k8s.io/release-utils/version.gitVersion=$(COSIGN_VERSION))

# go-build-tool builds package $(2) of the tools module $(4) (default
# hack/tools) at version $(3) into $(1)-$(3), with the go build flags $(5),
# and links $(1) to it, unless that is done already: kubebuilder's
# go-install-tool, with the version from the module's go.mod.
define go-build-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
echo "Building $(2)@$(3) into $(1)"; \
rm -f "$(1)"; \
$(GO) -C $(or $(4),hack/tools) build $(5) -o "$(1)-$(3)" $(2); \
ln -sf "$(1)-$(3)" "$(1)"; \
}
endef

# our-tool builds tool $(1) (make $(1)) when $(2), the binary a recipe is told
# to run, is the bin/$(1) this Makefile builds, and not one the caller named
# (COSIGN=cosign, HELM=helm on PATH, as make test-cluster's README reader).
our-tool = $(if $(filter $(LOCALBIN)/$(1),$(2)),$(MAKE) --no-print-directory $(1))
