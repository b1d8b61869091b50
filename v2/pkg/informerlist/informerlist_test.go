package informerlist_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/informerlist"
)

// The gates are the process's: each case runs in a process of its own (this
// test binary again, running TestInformerOfThisProcess), which reports how
// its informer's first request for Services asked.
const (
	childEnv     = "VCOIL_INFORMERLIST_CHILD_KUBECONFIG"
	reportPrefix = "first request: "
	listed       = "LIST"
	streamed     = "streamed list"
)

func TestInformersListUnlessClientGoIsToldOtherwise(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, env, want string
	}{
		{"by default", "", listed},
		{informerlist.EnvVar + "=true", "true", streamed},
		{informerlist.EnvVar + "=false", "false", listed},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestInformerOfThisProcess$", "-test.v")
			cmd.Env = append(os.Environ(), childEnv+"="+kubeconfig)
			if c.env != "" {
				cmd.Env = append(cmd.Env, informerlist.EnvVar+"="+c.env)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			_, got, ok := strings.Cut(string(out), reportPrefix)
			if !ok {
				t.Fatalf("the child reported nothing:\n%s", out)
			}
			got, _, _ = strings.Cut(got, "\n")
			if got != c.want {
				t.Errorf("the informer's first request was a %s, want a %s", got, c.want)
			}
		})
	}
}

// TestInformerOfThisProcess is the child of the test above; alone, it skips.
func TestInformerOfThisProcess(t *testing.T) {
	kubeconfig := os.Getenv(childEnv)
	if kubeconfig == "" {
		t.Skip("run by TestInformersListUnlessClientGoIsToldOtherwise")
	}
	uses := informerlist.UseLists(os.LookupEnv)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		first string
	)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			q := req.URL.Query()
			mu.Lock()
			if first == "" && req.URL.Path == "/api/v1/services" {
				switch {
				case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
					first = streamed
				case q.Get("watch") == "":
					first = listed
				default:
					first = "watch without initial events: " + req.URL.RawQuery
				}
			}
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	}
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.GetInformer(ctx, &corev1.Service{}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the Service informer did not sync")
	}
	mu.Lock()
	defer mu.Unlock()
	if uses != (first == listed) {
		t.Errorf("UseLists reported %v, but the first request was a %s", uses, first)
	}
	fmt.Println(reportPrefix + first)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
