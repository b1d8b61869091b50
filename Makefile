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
# buf compiles the .proto in Go (no protoc needed); it and gotestsum are
# pinned in the tools module hack/tools and built into Go's build cache. A
# recipe runs `$(call tool,NAME)` first, then "$$NAME": the tool runs in the
# recipe's directory, not in hack/tools.
tool = $(1)=$$($(GO) -C hack/tools tool -n $(1))
# Test output (go test -json of every run) for the summary at the end.
TEST_OUT ?= _out/test
PROGRAMS := vcoil vcoild vcoil-controller vcoil-egress
# Programs users run on their own machines, not in vcoil's image: the
# kubectl plugin (copied onto the PATH; docs/kubectl-vcoil.md).
CLI_PROGRAMS := kubectl-vcoil

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
# -buildvcs=auto: the programs carry the commit they were built from (vcoild
# serves it in its node state), also where GOFLAGS turns stamping off.
build: ## build every vcoil program into bin/ (kubectl-vcoil too)
	@mkdir -p $(BIN_DIR)
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -o $(BIN_DIR)/ $(addprefix ./v2/cmd/,$(PROGRAMS) $(CLI_PROGRAMS))

# ---- generated code ----

.PHONY: generate
generate: ## regenerate deepcopy code, CRDs (vcoil's, and the ClusterNetworkPolicy one of the pinned network-policy-api), RBAC, webhook manifests, gRPC code and the PrometheusRule of the alert rules
	$(call tool,buf); "$$buf" generate --template v2/pkg/cnirpc/buf.gen.yaml --path v2/pkg/cnirpc/cni.proto
	$(GO) tool controller-gen object paths=./v2/api/...
	$(GO) tool controller-gen \
		crd paths=./v2/api/... output:crd:artifacts:config=v2/config/crd/bases \
		rbac:roleName=controller paths=./v2/controllers/... output:rbac:artifacts:config=v2/config/rbac \
		webhook output:webhook:artifacts:config=v2/config/webhook
	$(GO) tool controller-gen rbac:roleName=egress paths=./v2/pkg/egress/routerwatch/... output:rbac:artifacts:config=v2/config/egress
	$(GO) tool controller-gen rbac:roleName=daemon paths="./v2/pkg/daemon/...;./v2/pkg/podendpoint/...;./v2/pkg/nodeipam/...;./v2/pkg/service/...;./v2/pkg/policy/agent/...;./v2/pkg/egress/agent/..." output:rbac:artifacts:config=v2/config/daemon
	$(GO) run ./v2/config/monitoring/cmd/prometheusrule
	@# The ClusterNetworkPolicy CRD (standard channel) of the pinned
	@# sigs.k8s.io/network-policy-api, as that module ships it.
	install -m 0644 "$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)/config/crd/standard/policy.networking.k8s.io_clusternetworkpolicies.yaml" \
		v2/config/crd/network-policy-api/

.PHONY: check-generate
check-generate: ## fail when make generate changes any file (works in a dirty tree too)
	@sum() { find $(GENERATED_DIRS) -type f -print0 | sort -z | xargs -0 sha256sum; }; \
	before=$$(sum); $(MAKE) --no-print-directory generate >/dev/null; after=$$(sum); \
	if [ "$$before" != "$$after" ]; then diff <(echo "$$before") <(echo "$$after") || true; \
		echo "generated files were out of date; make generate has now updated them" >&2; exit 1; fi

# ---- packages from Debian, pinned by upstream version ----

# hack/debian-packages lists them, with the make target that installs each
# group; v2/internal/debpkg reads it. Installed only when missing or of a
# version the list does not accept; the newest matching Debian revision is
# taken, since the archive drops old revisions.
DEBPKG := $(GO) run ./v2/internal/debpkg/cmd

.PHONY: deps
deps: ## install the Debian packages the tests need (nft, iptables, ping), pinned by upstream version (as root)
	@$(DEBPKG) install test

.PHONY: check-debian-pins
check-debian-pins: ## fail naming each package of hack/debian-packages whose pinned version the Debian archive no longer offers
	@$(DEBPKG) check-archive --update

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
# make test's local cluster is dual-stack: the e2e suite then runs every
# IPv4 row as in an IPv4 cluster and the same rows over IPv6 besides
# (TEST_LAB_IP_FAMILY=ipv4 for an IPv4-only cluster).
TEST_LAB_IP_FAMILY ?= dual

.PHONY: test
test: ## every test: lint, generated code, pins, the Go tests, the end-to-end suite on the local cluster (as root); then what did not run, and why
	@rm -rf $(TEST_OUT) $(LAB_OUT)/e2e/results.json; rc=0; \
	$(MAKE) --no-print-directory test-go TEST_SUMMARY= || rc=$$?; \
	if [ $$rc = 0 ]; then $(MAKE) --no-print-directory e2e LAB_IP_FAMILY=$(TEST_LAB_IP_FAMILY) || rc=$$?; fi; \
	$(MAKE) --no-print-directory test-summary TEST_E2E_RESULTS=$(LAB_OUT)/e2e/results.json; \
	exit $$rc

.PHONY: test-go
test-go: deps envtest-assets lint check-generate check-debian-pins ## lint, generated code, pins and the Go tests, without the local cluster; then the Go tests that did not run, and why
	@mkdir -p $(TEST_OUT); $(call tool,gotestsum); rc=0; \
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) "$$gotestsum" --format standard-quiet --hide-summary=skipped \
		--jsonfile $(TEST_OUT)/go-test.json -- $(GO_TEST_FLAGS) ./... || rc=$$?; \
	$(if $(TEST_SUMMARY),$(MAKE) --no-print-directory test-summary;) exit $$rc

# make test-go prints the summary itself; make test once, after the e2e suite.
TEST_SUMMARY ?= 1

.PHONY: test-summary
test-summary: ## print what the last make test or test-go did not run, and why (skipped Go tests by reason, e2e rows not run)
	@$(GO) run ./v2/internal/testsummary/cmd $(if $(TEST_E2E_RESULTS),--e2e-results $(TEST_E2E_RESULTS)) $(TEST_OUT)/*.json

# go test runs one fuzz target at a time: each target of each package, found
# by name, so that a new one cannot be forgotten here.
.PHONY: fuzz
fuzz: ## run every fuzz target of the module for FUZZTIME each (default 30s)
	@n=0; while read -r pkg dir; do \
		for target in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | cut -c6-); do \
			echo "==> $$pkg $$target" >&2; n=$$((n+1)); \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(or $(FUZZTIME),30s) </dev/null; done; \
	done < <($(GO) list -f '{{.ImportPath}} {{.Dir}}' ./...); \
		echo "==> ran $$n fuzz targets for $(or $(FUZZTIME),30s) each" >&2

# ---- benchmarks ----

BENCH_OUT ?= _out

.PHONY: bench-cni
bench-cni: deps envtest-assets ## ADD/DEL latency of vcoil beside ptp+host-local (as root; with VCOIL_VPP_BIN=<vpp binary> also vcoil on VPP, and with SERVICES=N on VPP with 0 and N Services); JSON in $(BENCH_OUT)/bench-cni.json
	@mkdir -p $(BENCH_OUT)
	@if [ -z "$(VCOIL_VPP_BIN)" ]; then echo "VCOIL_VPP_BIN is not set: the VPP rows are skipped (docs/cni-benchmark.md)" >&2; fi
	VCOIL_BENCH_CNI=$(abspath $(BENCH_OUT))/bench-cni.json KUBEBUILDER_ASSETS=$(ENVTEST_DIR) \
		$(if $(SERVICES),VCOIL_BENCH_CNI_SERVICES=$(SERVICES)) \
		$(if $(VCOIL_VPP_BIN),VCOIL_VPP_BIN=$(abspath $(VCOIL_VPP_BIN))) \
		$(GO) test ./v2/cmd/vcoild -run '^TestBenchCNI$$' -count=1 -v -timeout 60m | grep -E '^\s+(\||bench_test)' || true
	@cat $(BENCH_OUT)/bench-cni.json

.PHONY: bench-policy
bench-policy: ## NetworkPolicies from nothing to rules in the kernel (nftables), and one label change, for 1,000 local pods and 500 policies, without and with 100 ClusterNetworkPolicies (as root; with VCOIL_VPP_BIN=<vpp binary> also ACLs in VPP); JSON in $(BENCH_OUT)/bench-policy.json
	@mkdir -p $(BENCH_OUT)
	VCOIL_BENCH_POLICY=$(abspath $(BENCH_OUT))/bench-policy.json \
		$(if $(VCOIL_VPP_BIN),VCOIL_VPP_BIN=$(abspath $(VCOIL_VPP_BIN))) \
		$(GO) test ./v2/pkg/policy -run '^TestBenchPolicy(Kernel|VPP)$$' -count=1 -v -timeout 20m | grep -E '^\s+(\||bench_kernel_test)' || true
	@cat $(BENCH_OUT)/bench-policy.json

.PHONY: bench-egress
bench-egress: ## TCP uploads from a pod through an Egress (VXLAN, the Service's DNAT, a router's masquerade) beside the pod's direct path, same run (as root); go test -bench lines in $(BENCH_OUT)/bench-egress.txt
	@mkdir -p $(BENCH_OUT)
	$(GO) test ./v2/pkg/egress -run '^$$' -bench '^BenchmarkUpload$$' -benchtime 40x -count 5 -timeout 10m | tee $(BENCH_OUT)/bench-egress.txt | grep -E '^Benchmark'

.PHONY: clean
clean: ## remove build outputs (the cache in $(VCOIL_CACHE_DIR) stays)
	rm -rf $(BIN_DIR)
