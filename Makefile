# vcoil's one Makefile. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

include hack/versions.env

GO ?= go
# Everything built from the registries is cached here, outside the clone, in
# directories named after their versions: a build is skipped when its output
# exists. v2/internal/testenv looks in the same place.
VCOIL_CACHE_DIR ?= $(HOME)/.cache/vcoil
export VCOIL_CACHE_DIR
ENVTEST_DIR := $(VCOIL_CACHE_DIR)/envtest/k8s-v$(K8S_VERSION)-etcd-v$(ETCD_VERSION)
BIN_DIR := bin
GENERATED_DIRS := v2/api v2/config v2/pkg/cnirpc
PROGRAMS := vcoil vcoild vcoil-controller

K8S_MAJOR := $(word 1,$(subst ., ,$(K8S_VERSION)))
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=v$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(K8S_MAJOR) \
	-X k8s.io/component-base/version.gitMinor=$(K8S_MINOR) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=v$(K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=$(K8S_MAJOR) \
	-X k8s.io/client-go/pkg/version.gitMinor=$(K8S_MINOR)

# Targets of the local cluster and of the VPP tests live in mk/*.mk, each
# owned by its area; this file stays the one entry point.
-include mk/*.mk

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# ---- build ----

.PHONY: build
build: ## build every vcoil program into bin/
	@mkdir -p $(BIN_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN_DIR)/ $(addprefix ./v2/cmd/,$(PROGRAMS))

# ---- generated code ----

.PHONY: generate
generate: protoc ## regenerate deepcopy code, CRDs, RBAC, webhook manifests and gRPC code
	protoc --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative \
		v2/pkg/cnirpc/cni.proto
	$(GO) tool controller-gen object paths=./v2/api/...
	$(GO) tool controller-gen \
		crd paths=./v2/api/... output:crd:artifacts:config=v2/config/crd/bases \
		rbac:roleName=controller paths=./v2/controllers/... output:rbac:artifacts:config=v2/config/rbac \
		webhook output:webhook:artifacts:config=v2/config/webhook
	$(GO) tool controller-gen rbac:roleName=daemon paths="./v2/pkg/daemon/...;./v2/pkg/nodeipam/..." output:rbac:artifacts:config=v2/config/daemon

.PHONY: check-generate
check-generate: ## fail when make generate changes any file (works in a dirty tree too)
	@sum() { find $(GENERATED_DIRS) -type f -print0 | sort -z | xargs -0 sha256sum; }; \
	before=$$(sum); $(MAKE) --no-print-directory generate >/dev/null; after=$$(sum); \
	if [ "$$before" != "$$after" ]; then diff <(echo "$$before") <(echo "$$after") || true; \
		echo "generated files were out of date; make generate has now updated them" >&2; exit 1; fi

# ---- packages from Debian, pinned ----

# protoc for make generate; nft, iptables and ping for the tests that wire
# pods in network namespaces (portmap uses nft). Installed only when missing or
# of another version.
DEBIAN_PACKAGES := protobuf-compiler=3.21.12-3 nftables=1.0.6-2+deb12u2 iptables=1.8.9-2 iputils-ping=3:20221126-1+deb12u1

.PHONY: deps
deps: ## install the pinned Debian packages the build and tests need (as root)
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
		name=$${p%%=*}; want=$${p#*=}; \
		have=$$(dpkg-query -W -f='$${Version}' "$$name" 2>/dev/null || true); \
		[ "$$have" = "$$want" ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi

.PHONY: protoc
protoc:
	@v=$$(protoc --version 2>/dev/null || true); [ "$$v" = "libprotoc 3.21.12" ] || \
		{ echo "make generate needs protoc 3.21.12 (found: $${v:-none}): run make deps" >&2; exit 1; }

# ---- checks ----

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# ---- Kubernetes and etcd, built from the Go module proxy ----

K8S_BIN_DIR := $(VCOIL_CACHE_DIR)/kubernetes/v$(K8S_VERSION)
ETCD_BIN_DIR := $(VCOIL_CACHE_DIR)/etcd/v$(ETCD_VERSION)
K8S_PROGRAMS := kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl

.PHONY: kubernetes
kubernetes: $(addprefix $(K8S_BIN_DIR)/,$(K8S_PROGRAMS)) $(ETCD_BIN_DIR)/etcd ## build every Kubernetes program and etcd (about 22 min cold on 2 cores); prints the directory last
	@echo "$(K8S_BIN_DIR)"

$(K8S_BIN_DIR)/%:
	@mkdir -p $(@D)
	@echo "building $* v$(K8S_VERSION) from the Go module proxy into $(@D)" >&2
	cd hack/kubernetes && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/$*
	mv $@.tmp $@

$(ETCD_BIN_DIR)/etcd:
	@mkdir -p $(@D)
	@echo "building etcd v$(ETCD_VERSION) from the Go module proxy (about 1 min cold)" >&2
	cd hack/etcd && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp go.etcd.io/etcd/server/v3
	mv $@.tmp $@

# envtest wants kube-apiserver and etcd in one directory: links to the builds.
.PHONY: envtest-assets
envtest-assets: $(K8S_BIN_DIR)/kube-apiserver $(ETCD_BIN_DIR)/etcd ## build kube-apiserver and etcd for envtest; prints their directory last
	@mkdir -p $(ENVTEST_DIR)
	@ln -sfn $(K8S_BIN_DIR)/kube-apiserver $(ENVTEST_DIR)/kube-apiserver
	@ln -sfn $(ETCD_BIN_DIR)/etcd $(ENVTEST_DIR)/etcd
	@echo "$(ENVTEST_DIR)"

# ---- tests ----

# Test packages run one at a time (-p 1): the envtest suites each start an
# apiserver, and the machine may have two cores only.
GO_TEST_FLAGS ?= -count=1 -p 1 -timeout 30m

.PHONY: test
test: test-go ## every test: lint, generated code, the Go tests, then the end-to-end suite on the local cluster (as root)
	$(MAKE) --no-print-directory e2e

.PHONY: test-go
test-go: deps envtest-assets lint check-generate ## lint, generated code and the Go tests, without the local cluster
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test $(GO_TEST_FLAGS) ./...

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	$(GO) test ./v2/pkg/ipam -run '^$$' -fuzz FuzzParsePool -fuzztime $(or $(FUZZTIME),30s)
	$(GO) test ./v2/pkg/ipam -run '^$$' -fuzz FuzzNodeSubnet -fuzztime $(or $(FUZZTIME),30s)

# ---- benchmarks ----

BENCH_OUT ?= _out

.PHONY: bench-cni
bench-cni: deps envtest-assets ## ADD/DEL latency of vcoil beside ptp+host-local (as root); JSON in $(BENCH_OUT)/bench-cni.json
	@mkdir -p $(BENCH_OUT)
	VCOIL_BENCH_CNI=$(abspath $(BENCH_OUT))/bench-cni.json KUBEBUILDER_ASSETS=$(ENVTEST_DIR) \
		$(GO) test ./v2/cmd/vcoild -run '^TestBenchCNI$$' -count=1 -v -timeout 30m | grep -E '^\s+(\||bench_test)' || true
	@cat $(BENCH_OUT)/bench-cni.json

.PHONY: clean
clean: ## remove build outputs (the cache in $(VCOIL_CACHE_DIR) stays)
	rm -rf $(BIN_DIR)
