# Felix: Kubernetes operator plus broker for a sharded, replicated, durable log.
# Run `make help` for the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Pinned tool versions. Everything is built from Go modules (or, for SPIN,
# Debian's package) into bin/, cached by version.
CONTROLLER_GEN_VERSION ?= v0.23.0
STATICCHECK_VERSION    ?= v0.8.2
HELM_VERSION           ?= v3.22.0
KUBE_VERSION           ?= v1.37.2
ETCD_VERSION           ?= v3.7.3

IMG ?= felix:dev
GO  ?= go
export KUBE_VERSION ETCD_VERSION

CONTROLLER_GEN = $(shell hack/go-tool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_GEN_VERSION))
STATICCHECK    = $(shell hack/go-tool.sh staticcheck honnef.co/go/tools/cmd/staticcheck $(STATICCHECK_VERSION))
HELM           = $(shell hack/go-tool.sh helm helm.sh/helm/v3/cmd/helm $(HELM_VERSION))

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Run

.PHONY: dev
dev: build envtest-bins ## Run Felix locally: API server, operator and 5 broker pods as processes (no Kubernetes cluster).
	hack/dev.sh

.PHONY: dev-containers
dev-containers: build envtest-bins ## Like dev, with every broker pod a Docker container on its own bridge network (image built FROM scratch, nothing pulled).
	BASE=scratch hack/docker-build.sh felix:dev
	hack/dev.sh --docker-image felix:dev --docker-network felix-dev

##@ Real node

.PHONY: k8s-up
k8s-up: ## Start a real single-node Kubernetes (etcd, API server, containerd, kubelet, kube-proxy, CoreDNS...) built from pinned sources; state in .felix-k8s/ (docs/real-node.md; an hour or more cold on this shared machine).
	hack/k8s/up.sh

.PHONY: k8s-down
k8s-down: ## Stop the real node: its pods, components, iptables rules and mounts (keeps .felix-k8s/; K8S_PURGE=1 deletes it).
	hack/k8s/down.sh $(if $(K8S_PURGE),--purge)

.PHONY: k8s-check
k8s-check: ## On a running real node: run the Felix image as a pod behind a ClusterIP Service and reach it by DNS name from another pod.
	hack/k8s/check.sh

.PHONY: k8s-e2e
k8s-e2e: ## The end-to-end suite on the real node (test/k8s): helm install, restricted pods, DNS clients, evictions; starts the node if needed.
	hack/k8s/e2e.sh

##@ Development

.PHONY: generate
generate: ## Generate deepcopy code, CRDs and RBAC from kubebuilder markers.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd rbac:roleName=felix-operator paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	cp config/crd/bases/*.yaml charts/felix/crds/
	cp config/rbac/role.yaml charts/felix/files/role.yaml
	cp config/admission/broker_writes.yaml charts/felix/files/broker_writes.yaml

.PHONY: verify
verify: ## Regenerate and fail if generated files drift from the markers, or if go mod tidy would change go.mod/go.sum.
	hack/verify-generated.sh

.PHONY: lint
lint: ## gofmt, go vet and staticcheck.
	@out="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/') $$(git ls-files --others --exclude-standard '*.go'))"; \
		if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

.PHONY: build
build: ## Build the felix binary into bin/felix and the kubectl plugin into bin/kubectl-felix.
	$(GO) build -o bin/felix ./cmd/felix
	$(GO) build -o bin/kubectl-felix ./cmd/kubectl-felix

##@ Test

.PHONY: test
test: ## Run every test: lint, drift check, unit, envtest, fuzz seeds, models, image and chart.
	hack/test-all.sh

.PHONY: unit
unit: envtest-bins ## Go tests (envtest included) with the race detector off.
	KUBEBUILDER_ASSETS="$$(hack/build-envtest.sh)" $(GO) test ./... -count=1

NEMESIS_DURATION ?= 20m
NEMESIS_SEED     ?= 0
NEMESIS_FSYNC    ?= periodic
NEMESIS_FAULTS   ?=

.PHONY: nemesis
nemesis: envtest-bins ## Local-cluster nemesis with the history (linearizability) check and power cuts; NEMESIS_DURATION=20m, NEMESIS_SEED=0 (from the clock), NEMESIS_FSYNC=periodic (on-commit, periodic or none), NEMESIS_FAULTS= (e.g. power-cut,kill-9; empty: all).
	FELIX_NEMESIS_DURATION=$(NEMESIS_DURATION) FELIX_NEMESIS_SEED=$(NEMESIS_SEED) FELIX_NEMESIS_FSYNC=$(NEMESIS_FSYNC) FELIX_NEMESIS_FAULTS=$(NEMESIS_FAULTS) KUBEBUILDER_ASSETS="$$(hack/build-envtest.sh)" \
		$(GO) test ./test/localcluster -run '^(TestLocalCluster|TestLocalClusterContainers)$$/^Nemesis$$' -v -count=1 -timeout 3h

.PHONY: models
models: ## Model-check formal/ with SPIN, twins included.
	hack/check-models.sh

.PHONY: envtest-bins
envtest-bins: ## Build kube-apiserver and etcd from pinned modules into bin/k8s (about 11 minutes cold).
	@hack/build-envtest.sh >/dev/null

.PHONY: helm-lint
helm-lint: ## helm lint the chart.
	$(HELM) lint charts/felix

##@ Benchmarks

.PHONY: bench-peer
bench-peer: ## Measure NATS JetStream (R=3, pinned in hack/natsbench) and Felix R=3 in the same harness shapes, one after the other.
	hack/bench-peer.sh

.PHONY: bench-rounds
bench-rounds: envtest-bins ## Alternate the peer (fsync always) and Felix's cluster harness (OnCommit) in rounds; print each round's ratios (ROUNDS, DURATION, FULL_PAGE_CACHE=1).
	hack/bench-rounds.sh

##@ Image

.PHONY: docker-build
docker-build: ## Build the image (BASE selects the base image; default distroless static non-root).
	hack/docker-build.sh $(IMG)
