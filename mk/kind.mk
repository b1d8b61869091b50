# vcoil's e2e suite on a kind cluster (docs/e2e.md, "kind"; configs in
# v2/e2e/kind): for machines with a Docker engine and access to the registry
# of kind's node image. It cannot run on the project's own machines, which
# have neither: there the lab (make e2e) plays its part.
#
#   make kind-e2e       images, cluster, vcoil, the suite, cluster deleted
#   make kind-install   kind $(KIND_VERSION) from the Go module proxy, when
#                       it is not on PATH

# kind's release; its default node image (Kubernetes v1.37.0) is pinned with
# its digest in v2/e2e/kind/cluster.yaml.
KIND_VERSION := v0.33.0
KIND_CACHED := $(VCOIL_CACHE_DIR)/kind/$(KIND_VERSION)/kind
# kind on PATH, else the one make kind-install builds.
KIND_BIN ?= $(or $(shell command -v kind 2>/dev/null),$(KIND_CACHED))
KIND_CLUSTER ?= vcoil-e2e
KIND_DIR := v2/e2e/kind
KIND_OUT := _out/kind
KIND_KUBECONFIG = $(abspath $(KIND_OUT))/kubeconfig
# kubectl on PATH, else the lab's build (make kubernetes).
KIND_KUBECTL ?= $(or $(shell command -v kubectl 2>/dev/null),$(K8S_BIN_DIR)/kubectl)
# KIND_KEEP=1 leaves the cluster up after the suite.
KIND_KEEP ?=

kind_say = @printf '\033[1m==> %s\033[0m\n' "$(1)" >&2

.PHONY: kind-install
kind-install: $(KIND_CACHED) ## build the pinned kind (KIND_VERSION) from the Go module proxy (cached)

$(KIND_CACHED):
	$(call kind_say,building kind $(KIND_VERSION) from the Go module proxy)
	@mkdir -p $(@D)
	GOBIN=$(@D) CGO_ENABLED=0 $(GO) install sigs.k8s.io/kind@$(KIND_VERSION)

# Fails at once, saying why, where kind-e2e cannot run.
.PHONY: kind-preflight
kind-preflight:
	@command -v docker >/dev/null || { echo "make kind-e2e needs Docker: no docker command here. On the project's machines (no Docker engine, no registry) use make e2e, the lab." >&2; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "make kind-e2e needs a running Docker engine: docker info fails here. On the project's machines (no Docker engine, no registry) use make e2e, the lab." >&2; exit 1; }
	@[ -x "$(KIND_BIN)" ] || { echo "make kind-e2e needs kind $(KIND_VERSION): none on PATH nor in $(KIND_CACHED); make kind-install builds it" >&2; exit 1; }
	@[ -x "$(KIND_KUBECTL)" ] || { echo "make kind-e2e needs kubectl: none on PATH nor in $(K8S_BIN_DIR); make kubernetes builds it" >&2; exit 1; }

# vcoil's image and the network test agent as docker-archive tarballs (the
# lab's recipe, tag "kind"), for kind load image-archive.
.PHONY: kind-images
kind-images: build lab-bin lab-cni-plugins
	$(call kind_say,writing vcoil's images (tag kind) into $(KIND_OUT)/images)
	@mkdir -p $(KIND_OUT)/images
	@$(call vcoil_image,$(KIND_OUT)/images/vcoil.tar,ghcr.io/vcoil/vcoil:kind)
	@$(MKIMAGE) --out $(KIND_OUT)/images/agent.tar --tag vcoil-e2e-agent:kind --entrypoint /agent --file /agent=$(LAB_BIN)/agent

.PHONY: kind-e2e
kind-e2e: kind-preflight ## vcoil's e2e suite on a kind cluster (1 control plane + 2 workers; needs Docker and registry access); cluster deleted after
	@$(MAKE) --no-print-directory kind-images
	@mkdir -p $(KIND_OUT)/e2e
	@rc=0; $(MAKE) --no-print-directory kind-e2e-run || rc=$$?; \
	if [ -z "$(KIND_KEEP)" ]; then echo "==> deleting the kind cluster $(KIND_CLUSTER)" >&2; \
		$(KIND_BIN) delete cluster --name $(KIND_CLUSTER) --kubeconfig $(KIND_KUBECONFIG) || rc=1; \
	else echo "==> the kind cluster stays up (KIND_KEEP): KUBECONFIG=$(KIND_KUBECONFIG); $(KIND_BIN) delete cluster --name $(KIND_CLUSTER) removes it" >&2; fi; \
	if [ -f $(KIND_OUT)/e2e/results.md ]; then cat $(KIND_OUT)/e2e/results.md; fi; \
	exit $$rc

# The steps between creating and deleting the cluster; every wait bounded.
.PHONY: kind-e2e-run
kind-e2e-run:
	$(call kind_say,creating the kind cluster $(KIND_CLUSTER) ($(KIND_DIR)/cluster.yaml))
	$(KIND_BIN) create cluster --name $(KIND_CLUSTER) --config $(KIND_DIR)/cluster.yaml --kubeconfig $(KIND_KUBECONFIG)
	$(call kind_say,loading vcoil's images into the nodes)
	$(KIND_BIN) load image-archive --name $(KIND_CLUSTER) $(KIND_OUT)/images/vcoil.tar
	$(KIND_BIN) load image-archive --name $(KIND_CLUSTER) $(KIND_OUT)/images/agent.tar
	$(call kind_say,installing vcoil (kustomize overlay $(KIND_DIR)))
	$(KIND_KUBECTL) --kubeconfig $(KIND_KUBECONFIG) apply --server-side -k $(KIND_DIR)
	$(KIND_KUBECTL) --kubeconfig $(KIND_KUBECONFIG) -n kube-system rollout status daemonset/vcoil-daemon --timeout=5m
	$(KIND_KUBECTL) --kubeconfig $(KIND_KUBECONFIG) -n kube-system rollout status deployment/vcoil-controller --timeout=5m
	$(call kind_say,creating the default AddressPool (once vcoil-controller's webhook answers))
	@for i in $$(seq 60); do \
		$(KIND_KUBECTL) --kubeconfig $(KIND_KUBECONFIG) apply -f $(KIND_DIR)/pool.yaml && exit 0; sleep 3; done; \
	echo "the AddressPool could not be created in 3 minutes" >&2; exit 1
	$(KIND_KUBECTL) --kubeconfig $(KIND_KUBECONFIG) wait --for=condition=Ready nodes --all --timeout=5m
	$(call kind_say,running the e2e suite (v2/e2e/suite; report in $(KIND_OUT)/e2e))
	VCOIL_E2E_KUBECONFIG=$(KIND_KUBECONFIG) VCOIL_E2E_AGENT_IMAGE=vcoil-e2e-agent:kind VCOIL_E2E_PULL_POLICY=Never \
		VCOIL_E2E_REPORT_DIR=$(abspath $(KIND_OUT))/e2e $(GO) test $(E2E_FLAGS) ./v2/e2e/suite $(E2E_ARGS)
