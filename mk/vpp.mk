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
	$(GO) test $(VPP_TEST_FLAGS) -v ./v2/pkg/service/renderer/nat44/
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test $(VPP_TEST_FLAGS) -v -run 'VPP' ./v2/cmd/vcoild

# The NAT44 service renderer against a real VPP (docs/vpp-services.md): for
# 1,000, 10,000 and 30,000 services of 10 backends, the time of a Resync from
# an empty VPP and of one backend change, VPP's heap and the process's memory,
# beside the same mappings sent by a bare pipelined GoVPP loop (raw VPP).
.PHONY: bench-vpp-services
bench-vpp-services: ## NAT44 service renderer vs raw VPP (as root, VCOIL_VPP_BIN=<vpp binary>); JSON in $(BENCH_OUT)/bench-vpp-services.json
	@if [ -z "$${VCOIL_VPP_BIN:-}" ]; then echo "VCOIL_VPP_BIN is not set: name a VPP 25.10 binary (docs/vpp-services.md)" >&2; exit 1; fi
	@mkdir -p $(BENCH_OUT)
	VCOIL_BENCH_VPP_SERVICES=$(abspath $(BENCH_OUT))/bench-vpp-services.json \
		$(GO) test ./v2/pkg/service/renderer/nat44 -run '^TestBenchVPPServices$$' -count=1 -v -timeout 30m | grep -E '^\s+(\||VPP |bench_test)' || true
	@cat $(BENCH_OUT)/bench-vpp-services.json
