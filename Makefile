# tenantroute-operator
IMG ?= ghcr.io/tenantroute/tenantroute-operator:latest
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl
GO ?= go

# kube-apiserver and etcd for envtest, built from Go modules by hack/tools.
ENVTEST_ASSETS_DIR = $(shell cd hack/tools && $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes | sed 's|^|$(CURDIR)/bin/k8s/|')

.PHONY: all
all: build

##@ Development

.PHONY: generate
generate: ## Generate deepcopy methods for the API types.
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs (config/crd/bases) and the manager's ClusterRole (config/rbac/role.yaml); copy what the chart shares.
	$(GO) tool controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(GO) tool controller-gen rbac:roleName=manager-role paths=./... output:rbac:dir=config/rbac
	hack/sync-chart.sh

.PHONY: verify-generated
verify-generated: ## Fail if generated files differ from what the sources produce.
	hack/verify-generated.sh

.PHONY: fmt
fmt: ## Format the code.
	$(GO) fmt ./...

.PHONY: verify-fmt
verify-fmt: ## Fail if any Go file is not gofmt-formatted.
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "not gofmt-formatted (run make fmt):"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd into bin/k8s/<version> (first time ~6 minutes).
	hack/build-envtest-assets.sh

.PHONY: test-tools
test-tools: ## Build Pebble (Let's Encrypt's ACME test server) and its DNS server into bin/ for the HTTPS tests.
	cd hack/tools && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/pebble github.com/letsencrypt/pebble/v2/cmd/pebble
	cd hack/tools && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/pebble-challtestsrv github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv

.PHONY: deps
deps: ## Install missing system packages the tests need (redis-server), via apt-get.
	@hack/ensure-deps.sh test

.PHONY: test
test: deps envtest-assets test-tools verify-generated verify-fmt vet ## Run every test against a real API server, then the end-to-end run.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS_DIR) $(GO) test -count=1 -timeout 30m ./...
	# The proxy's suites and its rolling restart again on the fasthttp engine, which
	# serves a proxy with HTTPS on (the default, the loop engine, ran above; docs/proxy.md).
	TENANTROUTE_PROXY_ENGINE=fasthttp $(GO) test -count=1 -timeout 10m ./proxy/
	TENANTROUTE_PROXY_ENGINE=fasthttp $(GO) test -count=1 -timeout 10m -run TestRollingRestartLosesNothing ./cmd/
	$(MAKE) e2e

##@ Local run

.PHONY: demo
demo: deps ## Run the whole system locally and tell its story; stays up until Ctrl-C.
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop a running demo and everything it started.
	hack/demo.sh down

.PHONY: e2e
e2e: deps ## The demo's flow without narration, checking every step.
	DEMO_QUIET=1 DEMO_NONINTERACTIVE=1 DEMO_DIR=$(CURDIR)/.demo-e2e hack/demo.sh

##@ Build

.PHONY: build
build: ## Build the manager binary into bin/manager.
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/manager ./cmd

.PHONY: plugin
plugin: ## Build the kubectl plugin into bin/kubectl-tenantroute (kubectl tenantroute ...).
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/kubectl-tenantroute ./cmd/kubectl-tenantroute

.PHONY: run
run: ## Run the manager against the cluster of the current kubeconfig.
	$(GO) run ./cmd

.PHONY: dist
dist: ## Write dist/install.yaml, the single-file install, for the image IMG.
	hack/dist.sh $(IMG) dist/install.yaml

.PHONY: docker-build
docker-build: ## Build the container image.
	$(CONTAINER_TOOL) build -t $(IMG) .

##@ Deployment

.PHONY: install
install: ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs (and with them every TenantRoute, EdgeProvider and Region).
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: ## Deploy the operator with config/default, using the image $(IMG).
	$(KUBECTL) kustomize config/default | sed 's|ghcr.io/tenantroute/tenantroute-operator:latest|$(IMG)|' | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove the operator and its CRDs.
	$(KUBECTL) delete --ignore-not-found -k config/default

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
