package cnpreport

import (
	"slices"
	"strings"
	"testing"
)

const report = `apiVersion: policy.networking.k8s.io/v1alpha1
date: "2026-12-06T20:00:00Z"
implementation:
  organization: vcoil
  project: vcoil
  url: https://github.com/vcoil/vcoil
  version: dev
  contact: []
  additionalInformation: ""
kind: ConformanceReport
networkPolicyBundleVersion: v0.3.0
profiles:
- name: ClusterNetworkPolicy
  standard:
    result: failure
    statistics:
      Failed: 3
      Passed: 21
      Skipped: 0
    failedTests:
    - CNPAdminTierGress
    - CNPAdminTierIngressSCTP
    - CNPAdminTierPriorityField
`

const log = `=== RUN   TestClusterNetworkPolicyConformance/CNPAdminTierGress
=== RUN   TestClusterNetworkPolicyConformance/CNPAdminTierGress/Should_support_an_'allow-gress'_policy
    helper.go:107: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.1.0.5:9003]
=== RUN   TestClusterNetworkPolicyConformance/CNPAdminTierIngressSCTP
    helper.go:107: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.1.0.5:9003]
=== RUN   TestClusterNetworkPolicyConformance/CNPAdminTierIngressTCP
    helper.go:107: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 10.1.0.5:80]
=== RUN   TestClusterNetworkPolicyConformance/CNPAdminTierPriorityField
    helper.go:107: FAILED Command was [/agnhost connect --timeout=3s --protocol=tcp 10.1.0.5:80]
    helper.go:107: FAILED Command was [/agnhost connect --timeout=3s --protocol=sctp 10.1.0.5:9003]
`

// TestTheSummaryTellsSCTPFailuresFromOthers: a test whose failed probes
// are all SCTP ones is "SCTP only"; one with a TCP probe failed is not,
// even with SCTP failures too; a passed test's failed probes (retries
// that later succeeded) do not count.
func TestTheSummaryTellsSCTPFailuresFromOthers(t *testing.T) {
	s, err := Read(strings.NewReader(report), strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.SCTPOnly(), []string{"CNPAdminTierGress", "CNPAdminTierIngressSCTP"}; !slices.Equal(got, want) {
		t.Errorf("SCTP only: %v, want %v", got, want)
	}
	if got, want := s.Other(), []string{"CNPAdminTierPriorityField"}; !slices.Equal(got, want) {
		t.Errorf("other failures: %v, want %v", got, want)
	}
	md := s.Markdown()
	for _, want := range []string{"| ClusterNetworkPolicy | standard | failure | 21 | 3 | 0 |", "CNPAdminTierPriorityField (failed probes of sctp, tcp)"} {
		if !strings.Contains(md, want) {
			t.Errorf("the summary lacks %q:\n%s", want, md)
		}
	}
}
