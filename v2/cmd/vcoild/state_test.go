package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// After an ADD, vcoild's node state names the pod with its addresses, its
// block (one of the node's, holding the addresses) and its node-side veth
// as the kernel has it; the node subnet holds the NAT loopback; and the
// policy table is printed from the node's namespace.
func TestNodeStateAfterAnAdd(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 32)
	p := newPod(t, "state-a")
	n.mustAdd(p)

	var st *nodestate.State
	// The policy agent renders the pod's table after its ADD's rules; the
	// state is read until both are there.
	poll.Eventually(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		st, err = nodestate.Get(ctx, http.DefaultClient, n.state)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(st.NFTables, func(t nodestate.NFTable) bool { return t.Name == "vcoil-policy" }) {
			return fmt.Errorf("no vcoil-policy table in %+v", st.NFTables)
		}
		return nil
	})
	if st.APIVersion != nodestate.APIVersion || st.Node != n.name || st.Dataplane != "linux" || st.Version == "" {
		t.Errorf("header: %s %s %s %q", st.APIVersion, st.Node, st.Dataplane, st.Version)
	}
	for _, e := range st.Errors {
		if strings.HasPrefix(e, "daemon:") || strings.HasPrefix(e, "interfaces:") || strings.HasPrefix(e, "nftables:") {
			t.Errorf("error in the state: %s", e)
		}
	}

	subnet := nodeSubnet(t, n.name)
	if !slices.Equal(st.NodeSubnet, []netip.Prefix{subnet.IPv4, subnet.IPv6}) {
		t.Errorf("node subnet %v, want %s", st.NodeSubnet, subnet)
	}
	if len(st.NATLoopback) != 2 || !subnet.IPv4.Contains(st.NATLoopback[0]) || !subnet.IPv6.Contains(st.NATLoopback[1]) {
		t.Errorf("NAT loopback %v is not in the node subnet %s", st.NATLoopback, subnet)
	}

	i := slices.IndexFunc(st.Pods, func(x nodestate.Pod) bool { return x.ContainerID == p.id })
	if i < 0 {
		t.Fatalf("the state lacks pod %s: %+v", p.id, st.Pods)
	}
	got := st.Pods[i]
	if got.Namespace != p.namespace || got.Name != p.name || got.IfName != "eth0" || got.Pool != "default" ||
		!slices.Equal(got.IPs, []netip.Addr{p.ipv4(), p.ipv6()}) || got.Created.IsZero() {
		t.Errorf("pod %+v, want %s/%s with %s and %s from pool default", got, p.namespace, p.name, p.ipv4(), p.ipv6())
	}
	b := slices.IndexFunc(st.Blocks, func(x nodestate.Block) bool { return x.Name == got.Block })
	if b < 0 {
		t.Fatalf("the pod's block %q is not among the node's %+v", got.Block, st.Blocks)
	}
	block := st.Blocks[b]
	if !block.NodeSubnet || block.Pool != "default" || block.InUse < 1 ||
		!slices.ContainsFunc(block.Prefixes, func(x netip.Prefix) bool { return x.Contains(p.ipv4()) }) {
		t.Errorf("block %+v does not hold the pod's %s", block, p.ipv4())
	}

	host := linux.HostIfName(dataplane.PodKey{ContainerID: p.id, IfName: "eth0"})
	link, err := n.ns.Netlink().LinkByName(host)
	if err != nil {
		t.Fatal(err)
	}
	want := nodestate.Interface{Kind: "veth", Name: host, Index: uint32(link.Attrs().Index)}
	if got.Interface == nil || *got.Interface != want {
		t.Errorf("pod interface %+v, want %+v", got.Interface, want)
	}
	if st.Policies == nil || st.Policies.Renderer != "nftables" {
		t.Errorf("policies section %+v, want the nftables renderer's", st.Policies)
	}
	if st.Services == nil || st.Services.Renderer != "nftables" {
		t.Errorf("services section %+v, want the nftables renderer's", st.Services)
	}
	if st.Egress == nil {
		t.Error("no egress section, with --egress on")
	}
	if st.VPP != nil {
		t.Errorf("a VPP section on the Linux dataplane: %+v", st.VPP)
	}
	t.Logf("errors in the state: %q", st.Errors)
}

// vcoild refuses to serve the node state or its profiles anywhere but on
// loopback, naming the flag, before it reads or changes anything.
func TestStateAndPprofAddrMustBeLoopbackAddresses(t *testing.T) {
	bin := gobuild.Program(t, vcoildPackage)
	for _, flag := range []string{"--state-addr", "--pprof-addr"} {
		for _, addr := range []string{"0.0.0.0:9390", ":9390", "198.18.0.1:9390", "localhost:9390"} {
			out, err := exec.Command(bin, "--node-name", "node-x", flag, addr).CombinedOutput()
			if err == nil || !strings.Contains(string(out), fmt.Sprintf("%s %q: ", flag, addr)) || !strings.Contains(string(out), "loopback") {
				t.Errorf("vcoild %s %s: %v\n%s", flag, addr, err, out)
			}
		}
	}
}
