# The VPP dataplane's tests (docs/vpp.md). The mock tests run anywhere; the
# integration tests need root and a VPP 25.10 binary named by VCOIL_VPP_BIN
# (VCOIL_VPP_POD_IF=tap|af_packet chooses the pod interface; the default is
# tap where /dev/vhost-net exists, else af_packet). Without VCOIL_VPP_BIN the
# integration tests skip, saying so.

VPP_TEST_FLAGS ?= -count=1 -p 1 -timeout 20m

.PHONY: test-vpp
test-vpp: envtest-assets ## run the VPP dataplane's tests (with VCOIL_VPP_BIN=<vpp binary>, as root, against a real VPP)
	@if [ -z "$${VCOIL_VPP_BIN:-}" ]; then echo "VCOIL_VPP_BIN is not set: the integration tests against a real VPP will skip (docs/vpp.md)" >&2; fi
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test $(VPP_TEST_FLAGS) -v ./v2/pkg/dataplane/vpp/...
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test $(VPP_TEST_FLAGS) -v -run 'VPP' ./v2/cmd/vcoild
