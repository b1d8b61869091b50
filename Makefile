# vcoil's one Makefile. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# Everything built from the registries is cached here, outside the clone, under a
# directory named after its version, so a rebuild is skipped when the entry exists.
CACHE_DIR ?= $(HOME)/.cache/vcoil

K8S_VERSION := 1.37.1
ETCD_VERSION := 3.6.16
ENVTEST_DIR := $(CACHE_DIR)/envtest/k8s-v$(K8S_VERSION)-etcd-v$(ETCD_VERSION)

K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=v$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION))) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION))) \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X k8s.io/client-go/pkg/version.gitVersion=v$(K8S_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION))) \
	-X k8s.io/client-go/pkg/version.gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION)))

# ---- envtest assets: kube-apiserver and etcd built from the Go module proxy ----

.PHONY: envtest-assets
envtest-assets: $(ENVTEST_DIR)/kube-apiserver $(ENVTEST_DIR)/etcd ## build kube-apiserver and etcd for envtest; prints their directory last
	@echo "$(ENVTEST_DIR)"

$(ENVTEST_DIR)/kube-apiserver:
	@mkdir -p $(@D)
	@echo "building kube-apiserver v$(K8S_VERSION) from the Go module proxy (about 13 min cold on 2 cores)" >&2
	cd hack/kubernetes && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver
	mv $@.tmp $@

$(ENVTEST_DIR)/etcd:
	@mkdir -p $(@D)
	@echo "building etcd v$(ETCD_VERSION) from the Go module proxy (about 1 min cold)" >&2
	cd hack/etcd && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp go.etcd.io/etcd/server/v3
	mv $@.tmp $@
