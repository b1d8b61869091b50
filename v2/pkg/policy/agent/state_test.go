package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// flakyRenderer fails while fail is set and takes a second on clock.
type flakyRenderer struct {
	clock *time.Time
	fail  error
}

func (r *flakyRenderer) Render(context.Context, renderer.Txn) error {
	*r.clock = r.clock.Add(time.Second)
	return r.fail
}

func podRules(ns, name, ip string, ingress ...renderer.Rule) renderer.PodRules {
	return renderer.PodRules{Pod: renderer.PodID{Namespace: ns, Name: name}, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Ingress: ingress}
}

func permitTCPFrom(src string, first, last uint16) renderer.Rule {
	return renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
		SrcNetwork: netip.MustParsePrefix(src), SrcPort: renderer.AnyPort, DstPort: renderer.PortRange{First: first, Last: last}}
}

func podNames(p *nodestate.Policies) string {
	var s []string
	for _, pr := range p.Pods {
		s = append(s, fmt.Sprintf("%s/%s %v in=%d out=%d", pr.Namespace, pr.Name, pr.IPs, len(pr.Ingress), len(pr.Egress)))
	}
	return strings.Join(s, "; ")
}

// TestStateSourceShowsTheRulesLastRendered: the policies section holds the
// rules of every pod the renderer last rendered successfully (a failed
// transaction keeps the previous ones, a resync replaces all, a removed
// pod goes), the times, duration and errors of the transactions, and the
// node's always allowed sources, sorted.
func TestStateSourceShowsTheRulesLastRendered(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fr := &flakyRenderer{clock: &now}
	rd := newRendered("nftables", fr)
	rd.clock = func() time.Time { return now }
	a := &Agent{feed: pcache.NewFeed(t.Context(), pcache.New(), testr.New(t)), rendered: rd,
		node: configurator.Config{NATLoopback: []netip.Addr{netip.MustParseAddr("10.64.0.255")}, NodeAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("10.64.0.255")}}}
	state := func() *nodestate.Policies {
		t.Helper()
		var s nodestate.State
		if err := a.StateSource().Fill(t.Context(), &s); err != nil {
			t.Fatal(err)
		}
		return s.Policies
	}
	if p := state(); p.Renderer != "nftables" || len(p.Pods) != 0 || p.Sync != (nodestate.Sync{}) {
		t.Errorf("before any transaction: %+v", p)
	}
	if p := state(); fmt.Sprint(p.AlwaysAllowed) != "[10.64.0.255 198.18.0.2]" {
		t.Errorf("always allowed %v, want the node's address and NAT loopback once each, sorted", p.AlwaysAllowed)
	}

	web := podRules("default", "web", "10.64.0.5", permitTCPFrom("10.64.0.0/16", 80, 80), renderer.DenyAll)
	db := podRules("default", "db", "10.64.0.6")
	ctx := t.Context()
	if err := rd.Render(ctx, renderer.Txn{Resync: true, Pods: []renderer.PodRules{web, db}}); err != nil {
		t.Fatal(err)
	}
	first := now
	p := state()
	if got, want := podNames(p), "default/db [10.64.0.6] in=0 out=0; default/web [10.64.0.5] in=2 out=0"; got != want {
		t.Errorf("after the first resync: pods %s, want %s", got, want)
	}
	if want := (nodestate.Sync{Last: first, Duration: 1, Attempted: first}); p.Sync != want {
		t.Errorf("after the first resync: sync %+v, want %+v", p.Sync, want)
	}

	fr.fail = errors.New("nft: no such table")
	if err := rd.Render(ctx, renderer.Txn{Pods: []renderer.PodRules{{Pod: db.Pod, Removed: true}}}); err == nil {
		t.Fatal("the failing renderer did not fail")
	}
	p = state()
	if got := podNames(p); !strings.Contains(got, "default/db") {
		t.Errorf("after a failed transaction: pods %s, want the ones rendered before", got)
	}
	if p.Sync.Last != first || p.Sync.Attempted != now || p.Sync.Error != "nft: no such table" || p.Sync.Errors != 1 {
		t.Errorf("after a failed transaction: sync %+v", p.Sync)
	}

	fr.fail = nil
	if err := rd.Render(ctx, renderer.Txn{Pods: []renderer.PodRules{{Pod: db.Pod, Removed: true}}}); err != nil {
		t.Fatal(err)
	}
	if got, want := podNames(state()), "default/web [10.64.0.5] in=2 out=0"; got != want {
		t.Errorf("after db's removal: pods %s, want %s", got, want)
	}
	other := podRules("other", "api", "10.64.0.7")
	if err := rd.Render(ctx, renderer.Txn{Resync: true, Pods: []renderer.PodRules{other}}); err != nil {
		t.Fatal(err)
	}
	p = state()
	if got, want := podNames(p), "other/api [10.64.0.7] in=0 out=0"; got != want {
		t.Errorf("after a resync of another pod: pods %s, want %s", got, want)
	}
	if p.Sync.Error != "" || p.Sync.Errors != 1 || p.Sync.Last != now {
		t.Errorf("after the later successes: sync %+v", p.Sync)
	}
}

// TestPodRulesStateWritesRulesAsTheWireFormatSaysThem: actions and
// protocols by name, any address and any port left out.
func TestPodRulesStateWritesRulesAsTheWireFormatSaysThem(t *testing.T) {
	pr := podRules("default", "web", "10.64.0.5", permitTCPFrom("10.64.0.0/16", 8000, 8080), renderer.DenyAll)
	pr.Egress = []renderer.Rule{
		{Action: renderer.ActionPermit, Protocol: renderer.ProtocolSCTP, DstNetwork: netip.MustParsePrefix("fd00:64::/64"), SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(9)},
		{Action: renderer.ActionPermit, Protocol: renderer.ProtocolUDP, SrcPort: renderer.SinglePort(53), DstPort: renderer.AnyPort},
		renderer.PermitAll,
	}
	b, err := json.Marshal(PodRulesState(pr))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"namespace":"default","name":"web","ips":["10.64.0.5"],` +
		`"ingress":[{"action":"permit","protocol":"tcp","src":"10.64.0.0/16","dstPorts":{"first":8000,"last":8080}},{"action":"deny","protocol":"any"}],` +
		`"egress":[{"action":"permit","protocol":"sctp","dst":"fd00:64::/64","dstPorts":{"first":9,"last":9}},{"action":"permit","protocol":"udp","srcPorts":{"first":53,"last":53}},{"action":"permit","protocol":"any"}]}`
	if string(b) != want {
		t.Errorf("pod rules:\n %s\nwant\n %s", b, want)
	}
}
