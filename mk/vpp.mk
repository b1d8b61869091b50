# The tests against a real VPP (docs/vpp.md), wherever they are: they need
# root and a VPP 25.10 binary named by VCOIL_VPP_BIN (VCOIL_VPP_POD_IF=tap|
# af_packet chooses the pod interface; the default is tap where
# /dev/vhost-net exists, else af_packet), and without it they skip, saying
# so. Each gets the binary from vpptest.Binary, the one helper that skips
# without VCOIL_VPP_BIN: the packages whose tests call it are found by that
# call (as make fuzz finds its targets), so that a new one cannot be left
# out. Their other tests (the mock VPPs among them) run too.

VPP_TEST_FLAGS ?= -count=1 -p 1 -timeout 30m
VPP_TEST_PACKAGES = grep -rl --include='*_test.go' 'vpptest\.Binary(' v2 | xargs -r -n1 dirname | sort -u | sed 's|^|./|'

.PHONY: test-vpp
test-vpp: envtest-assets ## run every test that needs a real VPP, with its package's other tests (with VCOIL_VPP_BIN=<vpp binary>, as root)
	@if [ -z "$${VCOIL_VPP_BIN:-}" ]; then echo "VCOIL_VPP_BIN is not set: the tests against a real VPP will skip (docs/vpp.md)" >&2; fi
	@pkgs=$$($(VPP_TEST_PACKAGES)); echo "==> packages with tests against a real VPP:" $$pkgs >&2; \
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) $(GO) test $(VPP_TEST_FLAGS) -v $$pkgs

# The NAT44 and cnat service renderers against a real VPP
# (docs/vpp-services.md): for 1,000, 10,000 and 30,000 services of 10
# backends, the time of a Resync from an empty VPP and of one backend change,
# VPP's heap and the process's memory, beside the same mappings or
# translations sent by a bare pipelined GoVPP loop (raw VPP).
.PHONY: bench-vpp-services
bench-vpp-services: ## NAT44 and cnat service renderers vs raw VPP (as root, VCOIL_VPP_BIN=<vpp binary>); JSON in $(BENCH_OUT)/bench-vpp-services.json and bench-vpp-cnat.json
	@if [ -z "$${VCOIL_VPP_BIN:-}" ]; then echo "VCOIL_VPP_BIN is not set: name a VPP 25.10 binary (docs/vpp-services.md)" >&2; exit 1; fi
	@mkdir -p $(BENCH_OUT)
	VCOIL_BENCH_VPP_SERVICES=$(abspath $(BENCH_OUT))/bench-vpp-services.json \
		$(GO) test ./v2/pkg/service/renderer/nat44 -run '^TestBenchVPPServices$$' -count=1 -v -timeout 30m | grep -E '^\s+(\||VPP |bench_test)' || true
	@cat $(BENCH_OUT)/bench-vpp-services.json
	VCOIL_BENCH_VPP_CNAT=$(abspath $(BENCH_OUT))/bench-vpp-cnat.json \
		$(GO) test ./v2/pkg/service/renderer/cnat -run '^TestBenchVPPCnat$$' -count=1 -v -timeout 30m | grep -E '^\s+(\||VPP |bench_test)' || true
	@cat $(BENCH_OUT)/bench-vpp-cnat.json
