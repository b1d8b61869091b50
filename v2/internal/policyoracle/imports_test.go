package policyoracle

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// The oracle checks the renderers and the dataplanes: if it shared code with
// one of them, a bug there would be in both readings and go unnoticed. It may
// use the renderer API (package renderer), which is the model the renderers
// implement, and nothing below it.
func TestOracleImportsNoRendererAndNoDataplane(t *testing.T) {
	const (
		self        = "github.com/vcoil/vcoil/v2/internal/policyoracle"
		rendererAPI = "github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	)
	forbidden := []string{
		rendererAPI + "/",
		"github.com/vcoil/vcoil/v2/pkg/policy/processor",
		"github.com/vcoil/vcoil/v2/pkg/policy/configurator",
		"github.com/vcoil/vcoil/v2/pkg/dataplane",
		"github.com/vcoil/vcoil/v2/pkg/nft",
		"go.fd.io/govpp",
		"github.com/google/nftables",
		"sigs.k8s.io/knftables",
		"github.com/vishvananda/netlink",
	}
	// The go command that `go test` runs with is first on PATH.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", self).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatalf("go list -deps %s listed nothing", self)
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
				t.Errorf("the oracle depends on %s (forbidden: %s); it must stay independent of what it checks", dep, f)
			}
		}
	}
}
