# vcoil's image and manifests for a cluster of one's own (docs/install.md):
#
#   make images                      _out/images/vcoil.tar, tagged $(IMAGE)
#   make manifests IMAGE=reg/vcoil:v1 [APISERVER=HOST:PORT] [DATAPLANE=vpp]
#                                    _out/manifests/vcoil.yaml
#
# The image is written by the lab's mkimage as a docker-archive tarball
# (no Docker, no registry): ctr images import, docker load, podman load and
# skopeo read it. vcoil_image below is the one definition of its content,
# used by make images, make lab-images and make kind-images.

# The version in the tag: the nearest tag and commit, -dirty with changes.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE ?= ghcr.io/vcoil/vcoil:$(VERSION)
IMAGES_OUT := _out/images
# DATAPLANE=vpp renders the overlay for VPP nodes (docs/vpp.md); or name
# any kustomization with KUSTOMIZATION.
DATAPLANE ?= linux
KUSTOMIZATION ?= v2/config/$(if $(filter vpp,$(DATAPLANE)),overlays/vpp,default)
# APISERVER=HOST:PORT: where vcoild and vcoil-controller reach the
# apiserver, needed without kube-proxy (docs/install.md).
APISERVER ?=
MANIFESTS_OUT := _out/manifests

# $(call vcoil_image,TARBALL,TAG): every vcoil program at /, vcoild the
# entrypoint; the CNI binaries install-cni copies onto the node; the
# machine's nft with every library ldd lists for it (vcoild's renderers run
# nft). Needs make build, mkimage, the CNI plugins and nft.
vcoil_image = { [ -x $(NFT_BIN) ] || { echo "vcoil's image carries this machine's nft, and $(NFT_BIN) is missing: install Debian's nftables (make deps, as root)" >&2; exit 1; }; } && \
	$(MKIMAGE) --out $(1) --tag $(2) --entrypoint /vcoild \
	$(foreach p,$(PROGRAMS),--file /$(p)=$(BIN_DIR)/$(p)) \
	--file /opt/vcoil/cni/bin/vcoil=$(BIN_DIR)/vcoil \
	--file /opt/vcoil/cni/bin/portmap=$(CNI_PLUGINS_DIR)/portmap \
	--file /opt/vcoil/cni/bin/loopback=$(CNI_PLUGINS_DIR)/loopback \
	$$($(NFT_IMAGE_FILES))

.PHONY: mkimage
mkimage:
	@mkdir -p $(LAB_BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(LAB_BIN)/ ./v2/e2e/images/mkimage

.PHONY: images
images: build mkimage lab-cni-plugins ## write vcoil's image, tagged IMAGE (default ghcr.io/vcoil/vcoil:VERSION), as a docker-archive tarball: _out/images/vcoil.tar (ctr images import loads it)
	@mkdir -p $(IMAGES_OUT)
	@$(call vcoil_image,$(IMAGES_OUT)/vcoil.tar,$(IMAGE))
	@echo "$(IMAGES_OUT)/vcoil.tar: $(IMAGE)"

.PHONY: manifests
manifests: ## render vcoil's manifests with IMAGE and APISERVER (HOST:PORT, without kube-proxy; DATAPLANE=vpp: the VPP overlay) into _out/manifests/vcoil.yaml
	@$(GO) run ./v2/config/cmd/manifests --kustomization $(KUSTOMIZATION) --image $(IMAGE) \
		$(if $(APISERVER),--apiserver $(APISERVER)) --out $(MANIFESTS_OUT)/vcoil.yaml
	@echo "$(MANIFESTS_OUT)/vcoil.yaml: $(KUSTOMIZATION) with image $(IMAGE)$(if $(APISERVER), and the apiserver at $(APISERVER))"
