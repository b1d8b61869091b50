package cnpconformance_test

import (
	"context"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	api "sigs.k8s.io/network-policy-api/apis/v1beta1"
	"sigs.k8s.io/network-policy-api/conformance/tests"
	"sigs.k8s.io/network-policy-api/conformance/utils/flags"
	"sigs.k8s.io/network-policy-api/conformance/utils/suite"
)

// TestClusterNetworkPolicyConformance runs the conformance profiles that
// --conformance-profiles names with the upstream suite and writes the
// upstream report to --report-output. It runs only under make e2e-cnp
// (VCOIL_CNP_CONFORMANCE set), against the cluster of the kubeconfig.
func TestClusterNetworkPolicyConformance(t *testing.T) {
	if os.Getenv("VCOIL_CNP_CONFORMANCE") == "" {
		t.Skip("skipped: make e2e-cnp runs this against the lab (VCOIL_CNP_CONFORMANCE)")
	}
	cfg, err := config.GetConfig()
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := api.Install(c.Scheme()); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	// The suite lists the CRDs to find the API's bundle version.
	if err := apiextensionsv1.AddToScheme(c.Scheme()); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	clientSet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	profiles := suite.ParseConformanceProfiles(*flags.ConformanceProfiles)
	if profiles.Len() == 0 {
		t.Fatal("no conformance profile (--conformance-profiles)")
	}
	impl, err := suite.ParseImplementation(*flags.ImplementationOrganization, *flags.ImplementationProject,
		*flags.ImplementationURL, *flags.ImplementationVersion, *flags.ImplementationContact, *flags.ImplementationAdditionalInformation)
	if err != nil {
		t.Fatalf("implementation: %v", err)
	}
	s, err := suite.NewConformanceProfileTestSuite(suite.ConformanceProfileOptions{
		Options: suite.Options{
			Client:                     withoutSCTPServers(t, c),
			ClientSet:                  clientSet,
			KubeConfig:                 *cfg,
			Debug:                      *flags.ShowDebug,
			CleanupBaseResources:       *flags.CleanupBaseResources,
			SupportedFeatures:          suite.ParseSupportedFeatures(*flags.SupportedFeatures),
			ExemptFeatures:             suite.ParseSupportedFeatures(*flags.ExemptFeatures),
			EnableAllSupportedFeatures: *flags.EnableAllSupportedFeatures,
		},
		Implementation:      *impl,
		ConformanceProfiles: profiles,
	})
	if err != nil {
		t.Fatalf("suite: %v", err)
	}
	s.Setup(t)
	if err := s.Run(t, tests.ConformanceTests); err != nil {
		t.Fatalf("run: %v", err)
	}
	report, err := s.Report()
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	raw, err := yaml.Marshal(report)
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if *flags.ReportOutput != "" {
		if err := os.WriteFile(*flags.ReportOutput, raw, 0o644); err != nil {
			t.Fatalf("report: %v", err)
		}
	}
	t.Logf("Conformance report:\n%s", raw)
}

// withoutSCTPServers wraps c so that the containers of the objects the
// suite creates or updates that run `agnhost porter` for SCTP ports only
// run `agnhost pause` instead (package doc).
func withoutSCTPServers(t *testing.T, c client.WithWatch) client.Client {
	fix := func(obj client.Object) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetKind() != "StatefulSet" {
			return
		}
		containers, found, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if err != nil || !found {
			return
		}
		changed := false
		for i, x := range containers {
			ctr, ok := x.(map[string]any)
			if !ok || !sctpPorter(ctr) {
				continue
			}
			ctr["command"] = []any{"/agnhost", "pause"}
			containers[i], changed = ctr, true
			t.Logf("%s %s/%s: container %v serves SCTP only with agnhost porter, which exits without kernel SCTP: it runs agnhost pause",
				u.GetKind(), u.GetNamespace(), u.GetName(), ctr["name"])
		}
		if changed {
			if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				t.Fatalf("rewrite %s/%s: %v", u.GetNamespace(), u.GetName(), err)
			}
		}
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			fix(obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			fix(obj)
			return c.Update(ctx, obj, opts...)
		},
	})
}

// sctpPorter reports whether a container runs agnhost porter with only
// SCTP ports to serve (SERVE_SCTP_PORT_* variables and no other SERVE_*).
func sctpPorter(ctr map[string]any) bool {
	cmd, _, _ := unstructured.NestedStringSlice(ctr, "command")
	if !strings.Contains(strings.Join(cmd, " "), "agnhost porter") {
		return false
	}
	env, _, _ := unstructured.NestedSlice(ctr, "env")
	sctp := false
	for _, e := range env {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		name, _ := m["name"].(string)
		switch {
		case strings.HasPrefix(name, "SERVE_SCTP_PORT_"):
			sctp = true
		case strings.HasPrefix(name, "SERVE_"):
			return false
		}
	}
	return sctp
}

// TestOnlySCTPOnlyPorterContainersAreReplaced: the driver's rewrite touches
// porter containers whose only SERVE_ variables are SCTP ports, and no
// other container (a TCP server, a porter serving TCP too, a client).
func TestOnlySCTPOnlyPorterContainersAreReplaced(t *testing.T) {
	env := func(names ...string) []any {
		var out []any
		for _, n := range names {
			out = append(out, map[string]any{"name": n, "value": "foo"})
		}
		return out
	}
	porter := []any{"/bin/bash", "-c", "/agnhost porter"}
	tests := []struct {
		name string
		ctr  map[string]any
		want bool
	}{
		{"SCTP only", map[string]any{"command": porter, "env": env("SERVE_SCTP_PORT_9003")}, true},
		{"SCTP and TCP", map[string]any{"command": porter, "env": env("SERVE_SCTP_PORT_9003", "SERVE_PORT_80")}, false},
		{"TCP only", map[string]any{"command": porter, "env": env("SERVE_PORT_80")}, false},
		{"a TCP server", map[string]any{"command": []any{"/bin/bash", "-c", "/agnhost serve-hostname --tcp --port 80"}}, false},
		{"a client", map[string]any{}, false},
	}
	for _, tc := range tests {
		if got := sctpPorter(tc.ctr); got != tc.want {
			t.Errorf("%s: sctpPorter = %v, want %v", tc.name, got, tc.want)
		}
	}
}
