# The upstream Kubernetes network e2e tests against the lab (docs/e2e.md,
# "Upstream conformance"): e2e.test and agnhost of the lab's Kubernetes
# release built from the Go module proxy (module hack/e2e), the images the
# tests use made from a Debian root file system under the names the e2e
# framework expects, imported into the lab's nodes (LAB_EXTRA_IMAGES), and
# every [sig-network] spec that is not Serial, Disruptive, Flaky or
# feature-gated run inside the lab. Not part of make test: it takes minutes.
#
# Everything from the registries is cached by version under
# $(VCOIL_CACHE_DIR) and built only when missing.

AGNHOST_VERSION := 2.66.1
E2E_TOOLS_DIR := $(VCOIL_CACHE_DIR)/e2e/v$(K8S_VERSION)
E2E_TEST := $(E2E_TOOLS_DIR)/e2e.test
E2E_GINKGO := $(E2E_TOOLS_DIR)/ginkgo
E2E_AGNHOST := $(E2E_TOOLS_DIR)/agnhost-$(AGNHOST_VERSION)
E2E_REGRESSION := $(E2E_TOOLS_DIR)/regression-issue-74839

# debootstrap (group conformance of hack/debian-packages) makes the images'
# root file system: minbase plus what the tests run in their pods (group
# rootfs: GNU wget, since busybox-static's wget crashes on -T). debootstrap
# sees only the suite's release archive, so the packages are named without
# versions; the versions it installed are written to packages.txt beside the
# root file system, and the image tarball's cache key includes them. The root
# file system's own directory is named after the suite and the package names.
# The suite is the from= of those lines: one place names it.
CONFORMANCE_DEBIAN_SUITE := $(shell awk '$$1 == "rootfs" && sub(/^from=/, "", $$4) { print $$4; exit }' hack/debian-packages)
CONFORMANCE_DEBIAN_PACKAGES := $(shell awk '$$1 == "rootfs" { print $$2 }' hack/debian-packages)
CONFORMANCE_ROOTFS_KEY := $(shell printf '%s ' $(CONFORMANCE_DEBIAN_SUITE) $(CONFORMANCE_DEBIAN_PACKAGES) | sha256sum | cut -c1-12)
CONFORMANCE_ROOTFS := $(VCOIL_CACHE_DIR)/debian-rootfs/$(CONFORMANCE_DEBIAN_SUITE)-$(CONFORMANCE_ROOTFS_KEY)

# The image tarball, named after everything it is made of (the recipe in
# v2/e2e/conformance and the CoreDNS version of mk/lab.mk included: this
# file is read before lab.mk, whose variables are not set yet here).
# The installed versions (packages.txt) are read when make starts: make
# conformance-assets makes the root file system in a make of its own first.
CONFORMANCE_IMAGES_KEY := $(shell { printf '%s ' $(K8S_VERSION) $(AGNHOST_VERSION) $(CONFORMANCE_ROOTFS_KEY); grep '^COREDNS_VERSION' mk/lab.mk; \
	cat $(CONFORMANCE_ROOTFS)/packages.txt; \
	cat v2/e2e/conformance/images.go v2/e2e/images/imageset/*.go v2/e2e/images/pause/main.go; } 2>/dev/null | sha256sum | cut -c1-12)
CONFORMANCE_IMAGES := $(VCOIL_CACHE_DIR)/conformance-images/$(CONFORMANCE_IMAGES_KEY)/images.tar

# (Set with =: LAB_OUT and LAB_BIN come from mk/lab.mk, read after this file.)
CONFORMANCE_OUT = $(LAB_OUT)/conformance
CONFORMANCE_BIN = $(LAB_BIN)/conformance

# Which specs run (ginkgo regular expressions on the spec's full text): every
# [sig-network] spec, less the Serial, Disruptive and Flaky ones and those
# gated by a feature ([Feature:X], [FeatureGate:X], [Alpha], [Beta]), except
# [Feature:NetworkPolicy], which vcoild enforces. Go's expressions have no
# negative look-ahead: the skip names every feature that does not start
# with "Net", and the Networking ones. [Feature:SCTPConnectivity] stays out
# (the machine's kernel has no SCTP).
#
# A dual-stack lab (LAB_IP_FAMILY=dual, or the running lab's family) also
# runs [Feature:IPv6DualStack]: the skip then leaves out the features that
# start with "IPv6D" too (the one that does is IPv6DualStack).
CONFORMANCE_FOCUS := \[sig-network\]
CONFORMANCE_IP_FAMILY = $(or $(LAB_IP_FAMILY),$(shell cat $(LAB_STATE_DIR)/ip-family 2>/dev/null))
CONFORMANCE_SKIP_FEATURES = $(if $(filter dual,$(CONFORMANCE_IP_FAMILY)),[^NI\]]|N[^e]|Ne[^t]|I[^P]|IP[^v]|IPv[^6]|IPv6[^D],[^N\]]|N[^e]|Ne[^t])
CONFORMANCE_SKIP = \[(Serial|Disruptive|Flaky|Alpha|Beta)\]|\[FeatureGate:[^\]]*\]|\[Feature:(($(CONFORMANCE_SKIP_FEATURES))[^\]]*|Networking[^\]]*)\]
# Parallel ginkgo processes: the tests mostly wait for pods and packets, but
# the whole cluster shares the machine's two cores.
CONFORMANCE_PROCS ?= 4
CONFORMANCE_TIMEOUT ?= 90m
# CONFORMANCE_STRICT=1: fail when any spec in scope fails, not only a
# Conformance one. CONFORMANCE_KEEP_LAB=1: leave the lab up afterwards.
CONFORMANCE_STRICT ?=
CONFORMANCE_KEEP_LAB ?=
# More flags for e2e.test (after --) and for ginkgo.
CONFORMANCE_E2E_FLAGS ?=
CONFORMANCE_GINKGO_FLAGS ?=

conf_say = @printf '\033[1m==> %s\033[0m\n' "$(1)" >&2
# Runs a long build in the background of a progress line a minute.
conf_ticking = ( m=0; while sleep 60; do m=$$((m+1)); echo "    ... $(1) ($$m min)" >&2; done ) & ticker=$$!; \
	rc=0; $(2) || rc=$$?; kill $$ticker 2>/dev/null; exit $$rc

.PHONY: conformance-deps
conformance-deps: ## install debootstrap (pinned by minimum version) when missing
	@$(DEBPKG) install conformance

# ---- the e2e binaries (module hack/e2e) ----

.PHONY: conformance-tools
conformance-tools: $(E2E_TEST) $(E2E_GINKGO) $(E2E_AGNHOST) $(E2E_REGRESSION) ## build e2e.test, ginkgo, agnhost and regression-issue-74839 of the lab's Kubernetes release

$(E2E_TEST):
	$(call conf_say,building e2e.test v$(K8S_VERSION) from the Go module proxy (about 25 min on 2 cores the first time; cached in $(@D)))
	@mkdir -p $(@D)
	@$(call conf_ticking,still building e2e.test,cd hack/e2e && CGO_ENABLED=0 nice $(GO) test -c -trimpath -ldflags '$(K8S_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/test/e2e)
	@mv $@.tmp $@

$(E2E_GINKGO):
	$(call conf_say,building the ginkgo runner (the version e2e.test uses))
	@mkdir -p $(@D)
	cd hack/e2e && CGO_ENABLED=0 nice $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp github.com/onsi/ginkgo/v2/ginkgo
	@mv $@.tmp $@

$(E2E_AGNHOST):
	$(call conf_say,building agnhost $(AGNHOST_VERSION) (Kubernetes v$(K8S_VERSION)))
	@mkdir -p $(@D)
	@$(call conf_ticking,still building agnhost,cd hack/e2e && CGO_ENABLED=0 nice $(GO) build -trimpath -ldflags '-s -w -X main.Version=$(AGNHOST_VERSION)' -o $@.tmp k8s.io/kubernetes/test/images/agnhost)
	@mv $@.tmp $@

$(E2E_REGRESSION):
	$(call conf_say,building regression-issue-74839 (Kubernetes v$(K8S_VERSION)))
	@mkdir -p $(@D)
	cd hack/e2e && CGO_ENABLED=0 nice $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp k8s.io/kubernetes/test/images/regression-issue-74839
	@mv $@.tmp $@

# ---- the images ----

.PHONY: conformance-rootfs
conformance-rootfs: $(CONFORMANCE_ROOTFS)/packages.txt ## make the Debian root file system of the e2e images (debootstrap; the versions it installed in packages.txt)

$(CONFORMANCE_ROOTFS)/packages.txt: | conformance-deps
	$(call conf_say,making the Debian $(CONFORMANCE_DEBIAN_SUITE) root file system of the e2e images (about 2 min; cached in $(CONFORMANCE_ROOTFS)))
	@nice bash v2/e2e/conformance/debian-rootfs.sh $(CONFORMANCE_ROOTFS) $(CONFORMANCE_DEBIAN_SUITE) $(CONFORMANCE_DEBIAN_PACKAGES)
	@# Root file systems of earlier package lists go.
	@find $(dir $(CONFORMANCE_ROOTFS)) -mindepth 1 -maxdepth 1 ! -name $(notdir $(CONFORMANCE_ROOTFS)) -exec rm -rf {} +

.PHONY: conformance-images
conformance-images: $(CONFORMANCE_IMAGES) ## write the images of the e2e tests (agnhost, busybox, nginx, pause, ...) as one tarball for LAB_EXTRA_IMAGES

$(CONFORMANCE_IMAGES): $(CONFORMANCE_ROOTFS)/packages.txt $(E2E_AGNHOST) $(E2E_REGRESSION) | lab-coredns
	@$(MAKE) --no-print-directory conformance-bin
	$(call conf_say,writing the e2e images into $(@D))
	@# Tarballs of earlier recipes or versions go: each is a quarter GB.
	@mkdir -p $(@D) && find $(dir $(@D)) -mindepth 1 -maxdepth 1 ! -name $(notdir $(@D)) -exec rm -rf {} +
	@nice $(CONFORMANCE_BIN) images --out $@ --rootfs $(CONFORMANCE_ROOTFS)/rootfs \
		--agnhost $(E2E_AGNHOST) --coredns $(COREDNS_BIN) --pause $(LAB_BIN)/pause \
		--regression-issue-74839 $(E2E_REGRESSION) \
		--porter-cert $$(cd hack/e2e && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter/localhost.crt \
		--porter-key $$(cd hack/e2e && $(GO) list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/porter/localhost.key \
		| sed 's/^/    /' >&2

# The helper program (images, report) and the lab's pause, from the work tree.
.PHONY: conformance-bin
conformance-bin:
	@mkdir -p $(LAB_BIN)
	@CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LAB_BIN)/ ./v2/e2e/conformance ./v2/e2e/images/pause

.PHONY: conformance-images-path
conformance-images-path: ## print the path of the images tarball (for LAB_EXTRA_IMAGES)
	@echo $(CONFORMANCE_IMAGES)

.PHONY: conformance-assets
conformance-assets: conformance-tools ## build everything make e2e-conformance needs but the lab (cached)
	@$(MAKE) --no-print-directory conformance-rootfs
	@$(MAKE) --no-print-directory conformance-images

# ---- the run ----

# conformance-run runs the tests against the lab that is up (brought up with
# LAB_EXTRA_IMAGES=$(CONFORMANCE_IMAGES)) and writes the summary; make
# e2e-conformance does it all.
.PHONY: conformance-run
conformance-run: conformance-assets conformance-bin ## run the network e2e tests against the running lab (it must have the images); summary in _out/lab/conformance
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) status >/dev/null || { echo "the lab is not up: make e2e-conformance brings it up with the images" >&2; exit 1; }
	@rm -rf $(CONFORMANCE_OUT) && mkdir -p $(CONFORMANCE_OUT)
	@# Each node its own zone, so that the specs of topology-aware routing
	@# run (they skip without zones); the cluster is otherwise unchanged.
	@i=0; for n in $$($(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) kubectl get nodes -o name); do i=$$((i+1)); \
		$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) kubectl label --overwrite $$n topology.kubernetes.io/zone=lab-zone-$$i >/dev/null; done
	$(call conf_say,running the [sig-network] e2e specs in the lab ($(CONFORMANCE_PROCS) ginkgo processes; log in $(CONFORMANCE_OUT)/e2e.log))
	@start=$$(date +%s); rc=0; \
	$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) exec -- $(E2E_GINKGO) run --procs=$(CONFORMANCE_PROCS) --timeout=$(CONFORMANCE_TIMEOUT) \
		--focus='$(CONFORMANCE_FOCUS)' --skip='$(CONFORMANCE_SKIP)' --silence-skips --no-color \
		--json-report=ginkgo.json --output-dir=$(abspath $(CONFORMANCE_OUT)) $(CONFORMANCE_GINKGO_FLAGS) \
		$(E2E_TEST) -- --provider=skeleton --kubeconfig=$(LAB_STATE_DIR)/admin.kubeconfig --num-nodes=$(LAB_NODES) \
		--report-dir=$(abspath $(CONFORMANCE_OUT)) $(CONFORMANCE_E2E_FLAGS) \
		>$(CONFORMANCE_OUT)/e2e.log 2>&1 || rc=$$?; \
	echo "    ginkgo exited $$rc after $$(( $$(date +%s) - start ))s" >&2; \
	grep -E '^(Ran |FAIL|SUCCESS|\[FAIL\]|  \[FAIL\])' $(CONFORMANCE_OUT)/e2e.log | sed 's/^/    /' >&2 || true
	@$(CONFORMANCE_BIN) report --json-report $(CONFORMANCE_OUT)/ginkgo.json --out-dir $(CONFORMANCE_OUT) \
		--focus '$(CONFORMANCE_FOCUS)' --skip '$(CONFORMANCE_SKIP)' $(if $(CONFORMANCE_STRICT),--strict)

# The lab comes up with the images, the tests run, the lab goes down (kept
# with CONFORMANCE_KEEP_LAB=1). A lab already up is not used: it would lack
# the images, and it may be someone else's run.
.PHONY: e2e-conformance
e2e-conformance: lab-check-vpp ## upstream [sig-network] e2e tests (Conformance and the rest, non-serial, not feature-gated) against the lab; summary in _out/lab/conformance
	@start=$$(date +%s); \
	if [ -e $(LAB_STATE_DIR) ]; then echo "a lab is up (or its remains are: $(LAB_STATE_DIR)); make e2e-conformance brings up its own." >&2; \
		echo "    when it is yours: make lab-down; with its images already imported: make conformance-run" >&2; exit 1; fi; \
	$(MAKE) --no-print-directory conformance-assets; \
	images=$$($(MAKE) --no-print-directory -s conformance-images-path); \
	rc=0; $(MAKE) --no-print-directory lab-up LAB_EXTRA_IMAGES=$$images || rc=$$?; \
	if [ $$rc = 0 ]; then $(MAKE) --no-print-directory conformance-run || rc=$$?; fi; \
	if [ -z "$(CONFORMANCE_KEEP_LAB)" ]; then $(MAKE) --no-print-directory lab-down || rc=1; \
	else echo "==> the lab stays up (CONFORMANCE_KEEP_LAB); make lab-down removes it" >&2; fi; \
	echo "==> make e2e-conformance took $$(( ($$(date +%s) - start) / 60 )) min $$(( ($$(date +%s) - start) % 60 )) s" >&2; \
	exit $$rc

# ---- ClusterNetworkPolicy conformance (make e2e-cnp) ----

# The upstream conformance profile ClusterNetworkPolicy of
# sigs.k8s.io/network-policy-api, at the version go.mod pins (the suite's Go
# packages from the module proxy), run by the driver in v2/e2e/cnpconformance
# inside the lab; its base pods use the lab's agnhost (make
# conformance-images tags it as the version the suite names). The upstream
# report and a summary that tells SCTP-only failures from the others go to
# _out/lab/cnp (docs/e2e.md, "ClusterNetworkPolicy conformance").
CNP_OUT = $(LAB_OUT)/cnp
CNP_TEST = $(LAB_BIN)/cnp-conformance.test
# Experimental features to claim (comma-separated suite feature names):
# none is implemented yet.
CNP_FEATURES ?=
CNP_TIMEOUT ?= 90m

.PHONY: cnp-run
cnp-run: conformance-assets conformance-bin ## run the ClusterNetworkPolicy conformance profile against the running lab (it must have the images); report in _out/lab/cnp
	@$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) status >/dev/null || { echo "the lab is not up: make e2e-cnp brings it up with the images" >&2; exit 1; }
	@rm -rf $(CNP_OUT) && mkdir -p $(CNP_OUT) $(LAB_BIN)
	@CGO_ENABLED=0 $(GO) test -c -trimpath -o $(CNP_TEST) ./v2/e2e/cnpconformance
	$(call conf_say,running the ClusterNetworkPolicy conformance profile in the lab (log in $(CNP_OUT)/test.log))
	@start=$$(date +%s); rc=0; \
	$(LAB) $(LAB_FLAGS) $(LAB_UP_FLAGS) exec -- env VCOIL_CNP_CONFORMANCE=1 $(abspath $(CNP_TEST)) \
		-test.run '^TestClusterNetworkPolicyConformance$$' -test.v -test.timeout $(CNP_TIMEOUT) \
		--conformance-profiles=ClusterNetworkPolicy $(if $(CNP_FEATURES),--supported-features=$(CNP_FEATURES)) \
		--organization=vcoil --project=vcoil --url=https://github.com/vcoil/vcoil \
		--version=$$(git describe --always --dirty 2>/dev/null || echo dev) --contact=vcoil-maintainers \
		--additional-info="make e2e-cnp against the lab, LAB_DATAPLANE=$(or $(LAB_DATAPLANE),linux)" \
		--report-output=$(abspath $(CNP_OUT))/report.yaml >$(CNP_OUT)/test.log 2>&1 || rc=$$?; \
	echo "    the suite exited $$rc after $$(( $$(date +%s) - start ))s" >&2; \
	grep -E '^(--- |    --- )(PASS|FAIL)' $(CNP_OUT)/test.log | sed 's/^/    /' >&2 || true
	@$(CONFORMANCE_BIN) cnp-report --report $(CNP_OUT)/report.yaml --log $(CNP_OUT)/test.log --out $(CNP_OUT)/summary.md

.PHONY: e2e-cnp
e2e-cnp: lab-check-vpp ## upstream ClusterNetworkPolicy conformance profile against the lab (LAB_DATAPLANE as for lab-up); report in _out/lab/cnp
	@start=$$(date +%s); \
	if [ -e $(LAB_STATE_DIR) ]; then echo "a lab is up (or its remains are: $(LAB_STATE_DIR)); make e2e-cnp brings up its own." >&2; \
		echo "    when it is yours: make lab-down; with the e2e images imported: make cnp-run" >&2; exit 1; fi; \
	$(MAKE) --no-print-directory conformance-assets; \
	images=$$($(MAKE) --no-print-directory -s conformance-images-path); \
	rc=0; $(MAKE) --no-print-directory lab-up LAB_EXTRA_IMAGES=$$images || rc=$$?; \
	if [ $$rc = 0 ]; then $(MAKE) --no-print-directory cnp-run || rc=$$?; fi; \
	if [ -z "$(CONFORMANCE_KEEP_LAB)" ]; then $(MAKE) --no-print-directory lab-down || rc=1; \
	else echo "==> the lab stays up (CONFORMANCE_KEEP_LAB); make lab-down removes it" >&2; fi; \
	echo "==> make e2e-cnp took $$(( ($$(date +%s) - start) / 60 )) min $$(( ($$(date +%s) - start) % 60 )) s" >&2; \
	exit $$rc
