package proxy_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
)

// At start, what an earlier vcoild (or kube-proxy) left goes when this one
// will not keep it up: kube-proxy's tables when asked, served or not;
// vcoil's service table when the node does not serve Services; the
// announced LoadBalancer addresses when it does not announce them. What
// it keeps up stays.
func TestCleanUpRemovesWhatThisVcoildWillNotKeepUp(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "cleanup")
	leave := func() {
		node.Exec("nft", "add", "table", "inet", constants.ServiceTable)
		node.Exec("nft", "add", "table", "ip", "kube-proxy")
		node.Exec("nft", "add", "table", "ip6", "kube-proxy")
		node.IP("route", "replace", "blackhole", "10.64.0.0/26", "table", "119", "proto", "30")
		node.IP("route", "replace", "blackhole", "203.0.113.10/32", "table", "119", "proto", "32")
	}
	tables := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(node.Exec("nft", "list", "tables")), "\n") {
			if l != "" {
				out = append(out, strings.TrimPrefix(l, "table "))
			}
		}
		slices.Sort(out)
		return out
	}
	service, kubeProxy := "inet "+constants.ServiceTable, []string{"ip kube-proxy", "ip6 kube-proxy"}
	block, lb := "blackhole 10.64.0.0/26 proto 30", "blackhole 203.0.113.10 proto 32"
	for _, tc := range []struct {
		name       string
		serving    bool
		opts       proxy.Options
		wantTables []string
		wantRoutes []string
	}{
		{"serving and announcing", true, proxy.Options{AnnounceLoadBalancers: true},
			append([]string{service}, kubeProxy...), []string{block, lb}},
		{"serving, after kube-proxy", true, proxy.Options{AnnounceLoadBalancers: true, RemoveKubeProxyTables: true},
			[]string{service}, []string{block, lb}},
		{"serving, not announcing", true, proxy.Options{},
			append([]string{service}, kubeProxy...), []string{block}},
		{"not serving", false, proxy.Options{AnnounceLoadBalancers: true},
			kubeProxy, []string{block}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leave()
			opts := tc.opts
			opts.Netns, opts.Log = node.Path(), testr.New(t)
			if err := proxy.CleanUp(t.Context(), opts, tc.serving); err != nil {
				t.Fatal(err)
			}
			want := slices.Sorted(slices.Values(tc.wantTables))
			if got := tables(); !slices.Equal(got, want) {
				t.Errorf("tables %q, want %q", got, want)
			}
			got, err := exportTable(node)
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Sorted(slices.Values(tc.wantRoutes)); !slices.Equal(got, want) {
				t.Errorf("table 119 holds %q, want %q", got, want)
			}
		})
	}
}

// serviceNetworkVPP records the service networks set on it.
type serviceNetworkVPP struct {
	vpp.Dataplane
	set *[]vpp.ServiceNetwork
}

func (s serviceNetworkVPP) SetServiceNetwork(_ context.Context, n vpp.ServiceNetwork) error {
	*s.set = append(*s.set, n)
	return nil
}

// On VPP, a node that stops serving drops the service network an earlier
// vcoild made (the dataplane's first sync removes it); the kernel's
// nftables service table is not the VPP dataplane's, and stays.
func TestCleanUpOnVPPDropsTheServiceNetworkOfANodeThatDoesNotServe(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "cleanupvpp")
	node.Exec("nft", "add", "table", "inet", constants.ServiceTable)
	var set []vpp.ServiceNetwork
	opts := proxy.Options{Netns: node.Path(), VPP: serviceNetworkVPP{set: &set}, AnnounceLoadBalancers: true, Log: testr.New(t)}
	if err := proxy.CleanUp(t.Context(), opts, true); err != nil {
		t.Fatal(err)
	}
	if len(set) != 0 {
		t.Fatalf("a serving node's service network was set at clean-up: %+v", set)
	}
	if err := proxy.CleanUp(t.Context(), opts, false); err != nil {
		t.Fatal(err)
	}
	if len(set) != 1 || !reflect.DeepEqual(set[0], vpp.ServiceNetwork{}) {
		t.Fatalf("service networks set: %+v, want one empty", set)
	}
	if !strings.Contains(node.Exec("nft", "list", "tables"), constants.ServiceTable) {
		t.Error("the clean-up on VPP removed the kernel's service table")
	}
}

// nodeReader answers Get of a Node.
type nodeReader struct {
	client.Reader
	node *corev1.Node
	err  error
}

func (r nodeReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if r.err != nil {
		return r.err
	}
	*obj.(*corev1.Node) = *r.node
	return nil
}

// The proxy serves a node unless its Node is labelled
// vcoil.io/service-proxy=disabled; a Node it cannot read fails the start,
// naming the Node and why.
func TestServesNodeReadsTheNodesLabel(t *testing.T) {
	plain := &corev1.Node{}
	plain.Name = "node-a"
	disabled := plain.DeepCopy()
	disabled.Labels = map[string]string{proxy.LabelServiceProxy: proxy.Disabled}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{{"unlabelled", plain, true}, {"disabled", disabled, false}} {
		got, err := proxy.ServesNode(t.Context(), nodeReader{node: tc.node}, "node-a", testr.New(t))
		if err != nil || got != tc.want {
			t.Errorf("%s: ServesNode = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	refused := errors.New("connection refused")
	_, err := proxy.ServesNode(ctx, nodeReader{err: refused}, "node-a", testr.New(t))
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), `Node "node-a"`) {
		t.Fatalf("ServesNode = %v, want the read's last error naming the Node", err)
	}
}
