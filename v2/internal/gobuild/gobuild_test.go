package gobuild_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/gobuild"
)

const (
	hello  = "github.com/vcoil/vcoil/v2/internal/gobuild/testdata/hello"
	broken = "github.com/vcoil/vcoil/v2/internal/gobuild/testdata/broken"
)

func TestProgramBuildsARunnableBinaryOnce(t *testing.T) {
	bin := gobuild.Program(t, hello)
	if filepath.Base(bin) != "hello" {
		t.Fatalf("binary %s is not named after its package", bin)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || string(out) != "hello from a built program\n" {
		t.Fatalf("running %s: %v, %q", bin, err, out)
	}
	before, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	// A second call, as from another test, builds nothing.
	if again := gobuild.Program(t, hello); again != bin {
		t.Fatalf("second build at %s, first at %s", again, bin)
	}
	after, err := os.Stat(bin)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the binary was written again (%v)", err)
	}
}

func TestDirHoldsOneBinaryPerPackage(t *testing.T) {
	dir := gobuild.Dir(t, hello, "github.com/containernetworking/plugins/plugins/main/loopback")
	for _, name := range []string{"hello", "loopback"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Mode()&0o111 == 0 {
			t.Errorf("%s in %s: %v", name, dir, err)
		}
	}
}

// recorder is a test that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Fatal(args ...any) { r.failure = fmt.Sprint(args...) }

func TestAFailedBuildNamesThePackageAndShowsTheCompiler(t *testing.T) {
	r := &recorder{TB: t}
	gobuild.Program(r, broken)
	if !strings.Contains(r.failure, "build "+broken) || !strings.Contains(r.failure, `"not a number"`) {
		t.Fatalf("failure %q does not name the package and the compiler's message", r.failure)
	}
}
