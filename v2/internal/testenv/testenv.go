// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with vcoil's CRDs, and optionally its webhook configurations, for
// tests. The binaries come from KUBEBUILDER_ASSETS or from the directory
// `make envtest-assets` fills; without them tests fail with a message naming
// that target.
package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

// Env is a running apiserver with vcoil's CRDs.
type Env struct {
	Config *rest.Config
	// KubeConfig is a kubeconfig file's content for Config (an admin).
	KubeConfig []byte
	Scheme     *runtime.Scheme
	// Client talks to the apiserver directly (no cache).
	Client client.Client
	// Webhook tells a manager where to serve webhooks, when they are installed.
	Webhook *envtest.WebhookInstallOptions

	env *envtest.Environment
}

// Options choose what is installed.
type Options struct {
	// Webhooks installs v2/config/webhook, pointed at Webhook's local server.
	Webhooks bool
	// DualStackServices gives the apiserver an IPv6 service range
	// (DualStackServiceCIDR) after envtest's IPv4 one, so that Services may
	// be IPv6 or dual-stack.
	DualStackServices bool
	// ServiceCIDR, when set (and DualStackServices is not), is the
	// apiserver's service range instead of envtest's 10.0.0.0/24 (a
	// benchmark's thousands of Services).
	ServiceCIDR string
}

// DualStackServiceCIDR is the apiserver's service range with
// Options.DualStackServices: envtest's IPv4 range and an IPv6 one.
const DualStackServiceCIDR = "10.0.0.0/24,fd00:10:96::/112"

// RepoRoot finds the root of the vcoil module from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/vcoil/vcoil\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the vcoil module")
		}
		dir = parent
	}
}

// Versions reads hack/versions.env, which the Makefile includes too.
func Versions() (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "hack", "versions.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, val, ok := strings.Cut(line, "="); ok {
			v[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	}
	return v, sc.Err()
}

// CacheDir is where the Makefile caches what it builds: $VCOIL_CACHE_DIR, or
// $HOME/.cache/vcoil.
func CacheDir() string {
	if d := os.Getenv("VCOIL_CACHE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "vcoil")
}

// Assets returns the directory holding kube-apiserver and etcd.
func Assets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	v, err := Versions()
	if err != nil {
		return "", fmt.Errorf("read hack/versions.env: %w", err)
	}
	dir := filepath.Join(CacheDir(), "envtest", fmt.Sprintf("k8s-v%s-etcd-v%s", v["K8S_VERSION"], v["ETCD_VERSION"]))
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make envtest-assets` (or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd)", bin, dir)
		}
	}
	return dir, nil
}

// NewScheme knows the core Kubernetes types and vcoil's.
func NewScheme() *runtime.Scheme {
	s, err := kubescheme.New()
	if err != nil {
		panic(err)
	}
	return s
}

// Start starts an apiserver; Stop must be called. It suits TestMain, where
// one apiserver serves every test of a package.
func Start(opts Options) (*Env, error) {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "v2", "config", "crd", "bases"), filepath.Join(root, "v2", "config", "crd", "network-policy-api")},
		ErrorIfCRDPathMissing: true,
		Scheme:                NewScheme(),
		// envtest's 20 s is too short on a loaded 2-core machine: a
		// control plane that starts late is slow, not broken.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	if opts.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "v2", "config", "webhook", "manifests.yaml")},
		}
	}
	if opts.DualStackServices {
		env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", DualStackServiceCIDR)
	} else if opts.ServiceCIDR != "" {
		env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", opts.ServiceCIDR)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	e := &Env{Config: cfg, KubeConfig: env.KubeConfig, Scheme: env.Scheme, Client: c, env: env}
	if opts.Webhooks {
		e.Webhook = &env.WebhookInstallOptions
	}
	return e, nil
}

// UserKubeConfig returns a kubeconfig that authenticates as user in groups,
// for running a program with exactly the permissions RBAC gives it.
func (e *Env) UserKubeConfig(user string, groups ...string) ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// Stop stops the apiserver and etcd.
func (e *Env) Stop() error { return e.env.Stop() }

// zapLevel logs errors only, unless VCOIL_TEST_VERBOSE is set: tests say
// what they check themselves.
func zapLevel() zapcore.Level {
	if os.Getenv("VCOIL_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// Setup starts something the tests of a package share (a webhook server)
// until ctx ends; the function it returns waits until it has stopped.
type Setup func(ctx context.Context, e *Env) (wait func(), err error)

// Main runs a package's tests against one apiserver, with setups running
// around them.
func Main(m *testing.M, opts Options, env **Env, setups ...Setup) {
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	*env = e
	ctx, cancel := context.WithCancel(context.Background())
	code := 0
	var waits []func()
	for _, setup := range setups {
		wait, err := setup(ctx, e)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv: setup:", err)
			code = 1
			break
		}
		waits = append(waits, wait)
	}
	if code == 0 {
		code = m.Run()
	}
	cancel()
	for _, wait := range waits {
		wait()
	}
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stop:", err)
	}
	os.Exit(code)
}

// CreateNode creates a Node (without a kubelet) and returns it.
func (e *Env) CreateNode(t testing.TB, name, internalIP string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	n.Name = name
	if err := e.Client.Create(context.Background(), n); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	if internalIP != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
		if err := e.Client.Status().Update(context.Background(), n); err != nil {
			t.Fatalf("set address of node %s: %v", name, err)
		}
	}
	return n
}
