# The local cluster ("the lab") and the demo: a real Kubernetes cluster whose
# nodes are network namespaces on this machine, with vcoil installed from its
# manifests (overlay v2/config/overlays/lab). See docs/lab.md and docs/demo.md.
#
# Everything built from the registries is cached by version under
# $(VCOIL_CACHE_DIR); vcoil's own programs and images are built from the work
# tree into $(LAB_OUT). The running lab keeps all its state in $(LAB_STATE_DIR)
# and its logs in $(LAB_OUT)/logs (kept after lab-down, for post-mortems).

LAB_STATE_DIR ?= /var/lib/vcoil-lab
LAB_NODES ?= 2
# LAB_KUBE_PROXY=1: kube-proxy (nftables mode) on every node and vcoild
# started with --service-proxy=false; by default vcoil serves the services
# and no kube-proxy runs (never both on one node).
LAB_KUBE_PROXY ?=
# LAB_DATAPLANE: the worker nodes' dataplanes, given in turn: linux (the
# default), vpp, or linux,vpp (node1 Linux, node2 VPP). VPP nodes run the VPP
# binary VCOIL_VPP_BIN names (a VPP 25.10 built by hand: the project never
# builds VPP) and vcoil from the overlay lab-vpp. Other lab targets read a
# running lab's dataplanes from its state.
LAB_DATAPLANE ?=
VCOIL_VPP_BIN ?=
# LAB_IP_FAMILY: ipv4 (the default) or dual: nodes, pods, Services, the
# cluster DNS and the external host in both families (docs/lab.md). Other
# lab targets read a running lab's family from its state.
LAB_IP_FAMILY ?=
# LAB_VPP_SERVICES: the VPP nodes' service renderer, nat44 (the default) or
# cnat (docs/vpp-services.md).
LAB_VPP_SERVICES ?=
LAB_OVERLAY := v2/config/overlays/$(if $(findstring vpp,$(LAB_DATAPLANE)),lab-vpp,lab)
# More docker-archive tarballs to import into every node (space-separated).
LAB_EXTRA_IMAGES ?=
LAB_OUT := _out/lab
LAB_BIN := $(LAB_OUT)/bin
LAB_IMAGES := $(LAB_OUT)/images

COREDNS_VERSION := 1.14.7
# The CNI plugins are pinned by vcoil's go.mod (tool directives).
CNI_PLUGINS_VERSION := $(shell awk '$$1 == "github.com/containernetworking/plugins" {print $$2; exit}' go.mod)
COREDNS_BIN := $(VCOIL_CACHE_DIR)/coredns/v$(COREDNS_VERSION)/coredns
CNI_PLUGINS_DIR := $(VCOIL_CACHE_DIR)/cni-plugins/$(CNI_PLUGINS_VERSION)

# containerd and runc from Debian (group lab of hack/debian-packages):
# containerd 1.6 works with kubelet 1.37 (which falls back when the CRI
# RuntimeConfig call is missing).

# The lab program, run as root.
LAB := $(LAB_BIN)/lab
LAB_FLAGS = --state-dir $(LAB_STATE_DIR) --log-dir $(abspath $(LAB_OUT))/logs

# Progress lines while components build (a cold machine takes many minutes).
lab_say = @printf '\033[1m==> %s\033[0m\n' "$(1)" >&2

.PHONY: lab-deps
lab-deps: deps ## install the Debian packages of the lab (containerd, runc; pinned by upstream version) when missing
	@$(DEBPKG) install lab

# ---- components ----

.PHONY: lab-coredns
lab-coredns: $(COREDNS_BIN) ## build CoreDNS (pinned in mk/lab.mk) with the plugins a cluster needs (hack/coredns)

$(COREDNS_BIN):
	$(call lab_say,building CoreDNS v$(COREDNS_VERSION) from the Go module proxy (about 2 min cold))
	@mkdir -p $(@D)
	cd hack/coredns && CGO_ENABLED=0 nice $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp .
	@mv $@.tmp $@

.PHONY: lab-cni-plugins
lab-cni-plugins: $(CNI_PLUGINS_DIR)/portmap $(CNI_PLUGINS_DIR)/loopback ## build the CNI portmap and loopback plugins pinned by go.mod

$(CNI_PLUGINS_DIR)/portmap $(CNI_PLUGINS_DIR)/loopback:
	$(call lab_say,building the CNI $(@F) plugin $(CNI_PLUGINS_VERSION))
	@mkdir -p $(@D)
	CGO_ENABLED=0 nice $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp \
		github.com/containernetworking/plugins/plugins/$(if $(filter portmap,$(@F)),meta,main)/$(@F)
	@mv $@.tmp $@

# The lab program and the small programs of the images, from the work tree
# (go build is incremental: warm rebuilds take seconds).
.PHONY: lab-bin
lab-bin:
	$(call lab_say,building the lab program and the image helpers (pause, agent, mkimage))
	@mkdir -p $(LAB_BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LAB_BIN)/ \
		./v2/e2e/lab ./v2/e2e/images/agent ./v2/e2e/images/pause ./v2/e2e/images/mkimage

MKIMAGE = $(LAB_BIN)/mkimage

# vcoild's service renderer runs nft (knftables): vcoil's image
# (vcoil_image in mk/images.mk) carries the machine's nft (Debian's
# nftables, pinned in hack/debian-packages, group test, installed by make
# deps), every shared library ldd lists for it and the dynamic loader, each
# at its path. Evaluated in the recipe, after make deps.
NFT_BIN := /usr/sbin/nft
NFT_IMAGE_FILES = ldd $(NFT_BIN) | awk -v nft=$(NFT_BIN) 'BEGIN { print "--file " nft "=" nft } \
	$$2 == "=>" && $$3 ~ /^\// { print "--file " $$3 "=" $$3 } $$1 ~ /^\// { print "--file " $$1 "=" $$1 }'

.PHONY: lab-images
lab-images: build lab-bin lab-coredns lab-cni-plugins ## write the lab's images as docker-archive tarballs into _out/lab/images
	$(call lab_say,writing the images (pause, vcoil, coredns, agent) into $(LAB_IMAGES))
	@mkdir -p $(LAB_IMAGES)
	@$(MKIMAGE) --out $(LAB_IMAGES)/pause.tar --tag vcoil-pause:lab --entrypoint /pause --file /pause=$(LAB_BIN)/pause
	@$(call vcoil_image,$(LAB_IMAGES)/vcoil.tar,ghcr.io/vcoil/vcoil:lab)
	@$(MKIMAGE) --out $(LAB_IMAGES)/coredns.tar --tag vcoil-coredns:lab --entrypoint /coredns --file /coredns=$(COREDNS_BIN)
	@$(MKIMAGE) --out $(LAB_IMAGES)/agent.tar --tag vcoil-e2e-agent:lab --entrypoint /agent --file /agent=$(LAB_BIN)/agent

# Everything lab-up needs, built or installed when missing.
.PHONY: lab-components
lab-components: lab-deps ## build or install everything lab-up needs (cached; skipped when present)
	$(call lab_say,Kubernetes v$(K8S_VERSION) and etcd v$(ETCD_VERSION) (about 22 min on 2 cores the first time; cached in $(VCOIL_CACHE_DIR)))
	@( m=0; while sleep 60; do m=$$((m+1)); echo "    ... still building Kubernetes ($$m min)" >&2; done ) & ticker=$$!; \
	rc=0; nice $(MAKE) --no-print-directory kubernetes >/dev/null || rc=$$?; kill $$ticker 2>/dev/null; exit $$rc
	@$(MAKE) --no-print-directory lab-images

LAB_UP_FLAGS = --kubernetes-dir $(K8S_BIN_DIR) --etcd $(ETCD_BIN_DIR)/etcd --nodes $(LAB_NODES) \
	$(if $(LAB_DATAPLANE),--dataplane $(LAB_DATAPLANE)) $(if $(LAB_IP_FAMILY),--ip-family $(LAB_IP_FAMILY)) $(if $(LAB_VPP_SERVICES),--vpp-services $(LAB_VPP_SERVICES)) $(if $(VCOIL_VPP_BIN),--vpp-bin $(abspath $(VCOIL_VPP_BIN)))

# VPP nodes without a VPP fail at once, before anything is built.
.PHONY: lab-check-vpp
lab-check-vpp:
	@if [ -n "$(findstring vpp,$(LAB_DATAPLANE))" ] && [ -z "$(VCOIL_VPP_BIN)" ]; then \
		echo "LAB_DATAPLANE=$(LAB_DATAPLANE) needs VCOIL_VPP_BIN=/path/to/vpp: a VPP 25.10 binary you built (vcoil never builds VPP; see docs/vpp.md)" >&2; exit 2; fi

# ---- the lab ----

.PHONY: lab-up
lab-up: lab-check-vpp lab-components ## bring the local cluster up (LAB_NODES=2 worker nodes, LAB_DATAPLANE=linux|vpp|linux,vpp) with vcoil installed; as root
	$(call lab_say,bringing the lab up (state in $(LAB_STATE_DIR)))
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) up --agent $(abspath $(LAB_BIN))/agent \
		--images-dir $(abspath $(LAB_IMAGES)) --overlay $(abspath $(LAB_OVERLAY)) \
		$(if $(filter 1,$(LAB_KUBE_PROXY)),--kube-proxy) \
		$(foreach t,$(LAB_EXTRA_IMAGES),--extra-images $(abspath $(t)))

.PHONY: lab-reload
lab-reload: lab-images ## run the work tree's vcoil in the running lab: import the images again, restart vcoil's pods
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) reload --images-dir $(abspath $(LAB_IMAGES)) \
		$(foreach t,$(LAB_EXTRA_IMAGES),--extra-images $(abspath $(t)))

.PHONY: lab-down
lab-down: ## remove the lab and everything it made (idempotent); fails loudly if anything is left
	@if [ -x $(LAB) ]; then $(LAB) $(LAB_FLAGS) down; \
	else $(GO) run ./v2/e2e/lab $(LAB_FLAGS) down; fi

.PHONY: lab-check
lab-check: ## list whatever a lab left on the machine (exit 1 if anything)
	@$(GO) run ./v2/e2e/lab $(LAB_FLAGS) check

.PHONY: lab-status
lab-status: ## tell whether the lab is up and healthy, and how to reach it
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) status

.PHONY: lab-kubectl
lab-kubectl: ## kubectl against the lab: make lab-kubectl ARGS="get pods -A"
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) kubectl $(ARGS)

.PHONY: lab-vcoil
lab-vcoil: ## kubectl vcoil (bin/kubectl-vcoil) against the lab: make lab-vcoil ARGS="pod vcoil-demo/NAME"
	@test -x $(BIN_DIR)/kubectl-vcoil || $(MAKE) --no-print-directory build >/dev/null
	@# Exit code 1 is trace's "not allowed": an answer, not a failure of make.
	@rc=0; $(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) exec -- $(abspath $(BIN_DIR))/kubectl-vcoil $(ARGS) || rc=$$?; [ $$rc -le 1 ]

.PHONY: lab-exec
lab-exec: ## run CMD in the control plane's network namespace with KUBECONFIG set: make lab-exec CMD="go test ./v2/e2e/..."
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) exec $(if $(NETNS),--netns $(NETNS)) -- $(CMD)

# ---- the demo ----

# A new demo lab is dual-stack, as make test's (TEST_LAB_IP_FAMILY): make
# test after make demo then runs every row of the e2e suite in the demo's
# lab. LAB_IP_FAMILY=ipv4 asks for IPv4 only; a lab already up keeps its
# family (its state records it).
DEMO_IP_FAMILY ?= dual
demo: LAB_IP_FAMILY := $(or $(LAB_IP_FAMILY),$(if $(wildcard $(LAB_STATE_DIR)/ip-family),,$(DEMO_IP_FAMILY)))

.PHONY: demo
demo: lab-up ## README's "run it": the lab with vcoil, a sample app across the nodes, its connectivity matrix; stays up until make demo-down
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) demo

.PHONY: demo-down
demo-down: lab-down ## remove the demo and the lab

# ---- the services benchmark ----

# vcoil's service renderer (node1) beside kube-proxy in nftables mode (node2)
# in the lab, N Services x 10 endpoints for each size; see
# docs/services-benchmark.md. BENCH_FLAGS: e.g. --sizes 1000 --changes 50.
BENCH_FLAGS ?=
BENCH_OUT := _out/bench

.PHONY: bench-services
bench-services: lab-up ## vcoil's service renderer beside kube-proxy (nftables mode) in the lab: records in _out/bench/services.json, table in _out/bench/services.md
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) bench-services --out $(BENCH_OUT) $(BENCH_FLAGS)

# ---- the scale benchmark ----

# Simulated nodes and workloads around the lab's real nodes (docs/scale-benchmark.md):
# kwok keeps the simulated nodes Ready and their pods Running. kwok is
# pinned here and built from the Go module proxy with its own go.mod and
# go.sum (go install pkg@version), cached by version.
KWOK_VERSION := v0.8.0
KWOK_BIN := $(VCOIL_CACHE_DIR)/kwok/$(KWOK_VERSION)/kwok
# SCALE_FLAGS: sizes and rates, e.g. --sim-nodes 1000 --pods 30000 (lab bench-scale --help).
SCALE_FLAGS ?=

.PHONY: lab-kwok
lab-kwok: $(KWOK_BIN) ## build kwok (pinned in mk/lab.mk) for the simulated nodes

$(KWOK_BIN):
	$(call lab_say,building kwok $(KWOK_VERSION) from the Go module proxy (about 2 min cold))
	@mkdir -p $(@D)
	cd $(@D) && GOBIN=$(abspath $(@D))/bin.tmp CGO_ENABLED=0 nice $(GO) install -trimpath -ldflags '-s -w' sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	@mv $(@D)/bin.tmp/kwok $@ && rmdir $(@D)/bin.tmp

.PHONY: bench-scale
bench-scale: lab-up lab-kwok ## a simulated cluster (1,000 kwok nodes, 30,000 pods, 10,000 Services, 2,000 policies, churn) around the lab: vcoil-controller, one real vcoild and the apiserver measured; records in _out/bench/scale.json, table in _out/bench/scale.md
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) bench-scale --kwok $(KWOK_BIN) --out $(BENCH_OUT) $(SCALE_FLAGS)

.PHONY: lab-scale
lab-scale: lab-up lab-kwok ## add the simulated nodes and workloads to the lab and leave them (SCALE_FLAGS for sizes; make lab-scale-down removes them)
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) scale-up --kwok $(KWOK_BIN) $(SCALE_FLAGS)

.PHONY: lab-scale-down
lab-scale-down: ## remove the simulated nodes and workloads from the running lab
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) scale-down

# ---- the e2e suite against the lab ----

# The suite runs whole inside the control plane's network namespace (its
# exec calls dial the apiserver themselves), with the lab's settings and
# the kubectl plugin make build wrote.
E2E_FLAGS ?= -count=1 -timeout 30m -v

.PHONY: lab-e2e
lab-e2e: lab-up ## run the e2e suite (v2/e2e/suite) against the lab (report in _out/lab/e2e); the lab stays up
	@mkdir -p $(LAB_OUT)/e2e
	@mkdir -p $(TEST_OUT); $(call tool,gotestsum); \
	VCOIL_E2E_REPORT_DIR=$(abspath $(LAB_OUT))/e2e VCOIL_E2E_KUBECTL_VCOIL=$(abspath $(BIN_DIR))/kubectl-vcoil \
	$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) exec -- \
		"$$gotestsum" --format standard-verbose --hide-summary=skipped --jsonfile $(abspath $(TEST_OUT))/e2e-test.json -- \
		$(E2E_FLAGS) ./v2/e2e/suite $(E2E_ARGS)

# make bench-dataplane: pod traffic on the Linux dataplane, then on VPP, on
# the same machine (docs/dataplane-benchmark.md). Each lab comes up, runs the
# suite's TestBenchDataplane (agents' bulk TCP streams and 1-byte round
# trips, and the CPU they cost) and goes down; both add their rows to one
# JSON file, and the second prints the table of both. Without VCOIL_VPP_BIN
# only the Linux lab runs. A lab that is up is taken down first.
BENCH_DATAPLANE_JSON = $(abspath $(BENCH_OUT))/bench-dataplane.json
.PHONY: bench-dataplane
bench-dataplane: ## TCP throughput (1 and 4 streams), 1-byte round trips and CPU per GB between pods, Linux lab then VPP lab (as root; VCOIL_VPP_BIN=<vpp binary> for the VPP rows); JSON in $(BENCH_OUT)/bench-dataplane.json
	@mkdir -p $(BENCH_OUT); rm -f $(BENCH_DATAPLANE_JSON)
	@if [ -z "$(VCOIL_VPP_BIN)" ]; then echo "VCOIL_VPP_BIN is not set: the VPP lab is skipped (docs/dataplane-benchmark.md)" >&2; fi
	@rc=0; for dp in linux $(if $(VCOIL_VPP_BIN),vpp); do \
		$(MAKE) --no-print-directory lab-down || exit 1; \
		VCOIL_BENCH_DATAPLANE=$(BENCH_DATAPLANE_JSON) $(MAKE) --no-print-directory lab-e2e LAB_DATAPLANE=$$dp LAB_IP_FAMILY=ipv4 \
			E2E_ARGS='-run ^TestBenchDataplane$$$$' E2E_FLAGS='-count=1 -timeout 40m -v' || rc=1; \
	done; $(MAKE) --no-print-directory lab-down || rc=1; \
	cat $(BENCH_DATAPLANE_JSON); exit $$rc

# make soak-dataplane: a VPP lab (LAB_DATAPLANE, vpp by default), then the
# suite's TestSoakDataplane for SOAK_DURATION (10 minutes by default): 4 TCP
# streams pod → pod across nodes and 4 pod → node at once, failing on any
# stall longer than 2 s, broken connection or VPP restart. The lab stays up.
SOAK_DURATION ?= 10m
.PHONY: soak-dataplane
soak-dataplane: ## bulk TCP between pods across nodes and from pods to the node for SOAK_DURATION (10m) on a VPP lab: no stall, no lost connection, no VPP restart (as root, VCOIL_VPP_BIN=<vpp binary>)
	@VCOIL_SOAK_DATAPLANE=$(SOAK_DURATION) $(MAKE) --no-print-directory lab-e2e LAB_DATAPLANE=$(or $(LAB_DATAPLANE),vpp) \
		E2E_ARGS='-run ^TestSoakDataplane$$$$' E2E_FLAGS='-count=1 -timeout 60m -v'

# make e2e is part of make test: the lab comes up, the suite runs, and the
# lab goes down again — unless it was already up (a demo), which it leaves.
# A lab up of another IP family than LAB_IP_FAMILY (an IPv4 lab, and make
# test's dual stack) does not count: lab up replaces it, saying so, and it
# goes down after the suite like a lab of make e2e's own.
.PHONY: e2e
e2e: lab-check-vpp ## the local cluster up, the e2e suite against it (report in _out/lab/e2e), the cluster down; as root
	@was_up=0; $(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) status >/dev/null 2>&1 && was_up=1; \
	rc=0; $(MAKE) --no-print-directory lab-e2e || rc=$$?; \
	if [ $$was_up = 0 ]; then $(MAKE) --no-print-directory lab-down || rc=1; \
	else echo "==> the lab was up before make e2e: it stays up" >&2; fi; \
	if [ -f $(LAB_OUT)/e2e/results.md ]; then cat $(LAB_OUT)/e2e/results.md; fi; \
	exit $$rc
