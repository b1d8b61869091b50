package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/netnsdial"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// pprofURL is where the lab's vcoild serves Go's profiles (its overlay
// sets --pprof-addr) in its node's network namespace.
const pprofURL = "http://127.0.0.1:6060/debug/pprof/"

// gcMetrics are the garbage collector's cycles and the memory limit it
// works under, as vcoild exposes them.
var gcMetrics = []string{"go_gc_duration_seconds_count", "go_gc_gomemlimit_bytes"}

// saveProfile writes vcoild's profile kind (query: its parameters, e.g.
// "seconds=20") to ProfileDir as vcoild-<kind>.pb.gz for `go tool pprof`.
// A profile explains a figure but is not one: the run goes on without it,
// saying why.
func (s *Sim) saveProfile(ctx context.Context, n topology.Node, kind, query string, wait time.Duration) {
	if s.o.ProfileDir == "" {
		return
	}
	path := filepath.Join(s.o.ProfileDir, "vcoild-"+kind+".pb.gz")
	if err := fetchProfile(ctx, n, kind, query, wait, path); err != nil {
		s.logf("no %s profile of vcoild: %v", kind, err)
		return
	}
	what := kind
	if kind == "profile" {
		what = "CPU"
	}
	s.logf("vcoild's %s profile: %s", what, path)
}

func fetchProfile(ctx context.Context, n topology.Node, kind, query string, wait time.Duration, path string) error {
	hc := &http.Client{Timeout: wait + 10*time.Second, Transport: &http.Transport{DialContext: netnsdial.Dialer("/run/netns/" + n.Netns), DisableKeepAlives: true}}
	url := pprofURL + kind
	if query != "" {
		url += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", url, err)
	}
	return f.Close()
}
