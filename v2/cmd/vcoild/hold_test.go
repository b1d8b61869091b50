package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
)

// A downgrade over state of a newer format that only one part would meet
// (here the service proxy's nftables table; a pod veth's alias): vcoild
// starts none of its writers (pods, blocks, routes, services, policies,
// egress), fails readiness naming the object, serves health and metrics,
// and leaves the node and the apiserver as they were.
func TestVcoildStartsNoWriterOverNewerState(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	for i, tc := range []struct {
		name   string
		newer  func(n *node) // makes one object newer
		object string        // what the log names
	}{
		{"a service table of a newer format", func(n *node) {
			table := "inet " + constants.ServiceTable
			n.ns.Exec("nft", "add table "+table)
			_, _ = n.ns.TryExec(context.Background(), "nft", "delete set "+table+" format")
			n.ns.Exec("nft", "add set "+table+` format { type ipv4_addr; comment "vcoil services v3"; }`)
		}, "nftables table inet " + constants.ServiceTable},
		{"a pod veth of a newer format", func(n *node) {
			veths := n.podVeths()
			if len(veths) != 1 {
				n.t.Fatalf("pod veths %v, want one", veths)
			}
			n.ns.IP("link", "set", veths[0], "alias", "vcoil@3 whatever a newer vcoild writes")
		}, "link "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabric(t)
			n := newNode(t, f, 40+i)
			p := newPod(t, fmt.Sprintf("hold%d", i))
			n.mustAdd(p)
			n.kill()
			tc.newer(n)
			before, beforeAPI := n.snapshot(), apiSnapshot(t, n.name)

			n.launch()
			poll.Eventually(t, 30*time.Second, func() error {
				code, body := testenv.HTTPGet(n.health + "/readyz?verbose")
				if code == http.StatusOK || !strings.Contains(body, "[-]formats failed") {
					return fmt.Errorf("readiness %d: %s", code, body)
				}
				return nil
			})
			env.WaitForEvent(t, 20*time.Second, testenv.EventOf{Kind: "Node", Name: n.name, Type: "Warning",
				Reason: daemon.ReasonNewerStateFormat, Note: tc.object})
			for _, want := range []string{tc.object, "format version 3", "newer vcoild"} {
				if !strings.Contains(n.log.String(), want) {
					t.Errorf("the log lacks %q", want)
				}
			}
			if code, _ := testenv.HTTPGet(n.health + "/healthz"); code != http.StatusOK {
				t.Errorf("/healthz answers %d", code)
			}
			if code, _ := testenv.HTTPGet(n.metrics); code != http.StatusOK {
				t.Errorf("/metrics answers %d", code)
			}
			if code, _ := testenv.HTTPGet(n.state + "/"); code != 0 {
				t.Errorf("the node state server answers (%d): it reads nothing while vcoild holds", code)
			}
			if after := n.snapshot(); after != before {
				t.Errorf("the node changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if after := apiSnapshot(t, n.name); after != beforeAPI {
				t.Errorf("the apiserver's objects of the node changed:\nbefore: %s\nafter:  %s", beforeAPI, after)
			}
		})
	}
}

// snapshot is what vcoild's writers change in the node's namespace: the
// nftables ruleset, routes and rules of every table, links and addresses.
func (n *node) snapshot() string {
	n.t.Helper()
	// The kernel's duplicate address detection still changes a new
	// veth's link-local address (and adds its local route): not vcoild's
	// doing, so the snapshot waits for it to end.
	poll.Eventually(n.t, 10*time.Second, func() error {
		if out := n.ns.IP("addr"); strings.Contains(out, "tentative") {
			return fmt.Errorf("addresses still tentative:\n%s", out)
		}
		return nil
	})
	var b strings.Builder
	for _, args := range [][]string{
		{"-4", "route", "show", "table", "all"}, {"-6", "route", "show", "table", "all"},
		{"-4", "rule"}, {"-6", "rule"}, {"-d", "link"}, {"addr"},
	} {
		b.WriteString(n.ns.IP(args...))
	}
	b.WriteString(n.ns.Exec("nft", "list", "ruleset"))
	return b.String()
}

// apiSnapshot is what vcoild writes in the apiserver about its node: its
// blocks, its block requests, the Node's annotations.
func apiSnapshot(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, b := range blocksOf(t, name) {
		out = append(out, "block "+b.Name+"@"+b.ResourceVersion)
	}
	var reqs vcoilv2.BlockRequestList
	if err := env.Client.List(ctx, &reqs, client.MatchingLabels{vcoilv2.LabelNode: name}); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs.Items {
		out = append(out, "request "+r.Name+"@"+r.ResourceVersion)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	for k, v := range node.Annotations {
		out = append(out, "annotation "+k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
