package vpp

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/kernelns"
)

// The node's own processes and hostPorts. The node's kernel holds the
// node's addresses too (and 127.0.0.1): a connection of the kubelet or a
// hostNetwork pod to one of them and a host port would stay in the kernel,
// where nothing listens, and never meet VPP's static mapping. So the kernel
// DNATs such connections itself, in the output hook of its own table,
// straight to the pod (the reply comes back through VPP, which hands the
// node's address to the kernel, where conntrack undoes the DNAT). A
// hostPort whose hostIP is 127.0.0.1 is served there only, as portmap
// serves it: to the node's own processes. A client bound to 127.0.0.1 is
// masqueraded to the interconnect's address on the way out (loopback
// sources may not leave the node otherwise).

// HostPortTable is the nftables table (family ip) in the node's namespace
// that DNATs the node's own connections to its hostPorts.
const HostPortTable = "vcoil-vpp-hostports"

// HostPortDNAT is one destination the node's kernel sends to a pod: the
// node's address (or 127.0.0.1), protocol and host port, and the pod's
// address and container port.
type HostPortDNAT struct {
	Addr     netip.Addr
	Protocol uint8
	Port     uint16
	PodAddr  netip.Addr
	PodPort  uint16
}

func compareHostPortDNATs(a, b HostPortDNAT) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// kernelHostPorts are the DNATs of every wired pod's hostPorts: those VPP
// holds a static mapping for, and those on 127.0.0.1. The caller holds
// d.mu.
func (d *driver) kernelHostPorts() []HostPortDNAT {
	var out []HostPortDNAT
	for _, st := range d.pods {
		if !st.wired {
			continue
		}
		for _, m := range st.hostPorts {
			out = append(out, HostPortDNAT{Addr: m.external, Protocol: m.protocol, Port: m.externalPort, PodAddr: m.local, PodPort: m.localPort})
		}
		for _, m := range st.pod.PortMappings {
			if m.HostIP != netip.AddrFrom4([4]byte{127, 0, 0, 1}) || !st.pod.IPv4.IsValid() {
				continue
			}
			proto, ok := hostPortProtocol(m.Protocol)
			if !ok {
				continue
			}
			out = append(out, HostPortDNAT{Addr: m.HostIP, Protocol: proto, Port: m.HostPort, PodAddr: st.pod.IPv4, PodPort: m.ContainerPort})
		}
	}
	slices.SortFunc(out, compareHostPortDNATs)
	// Two pods cannot hold one host port (the scheduler sees to it); if
	// they do, the first by address keeps it.
	return slices.CompactFunc(out, func(a, b HostPortDNAT) bool { return compareHostPortDNATs(a, b) == 0 })
}

// syncKernelHostPorts gives the node's kernel the hostPort DNATs when they
// changed since it was last told (always after a failure). A failure is
// logged, not returned: it concerns the node's own clients only, and the
// next pod change or sync tries again. The caller holds d.mu.
func (d *driver) syncKernelHostPorts(ctx context.Context) {
	want := d.kernelHostPorts()
	if d.kernelHostPortsKnown && slices.Equal(want, d.kernelHostPortsDone) {
		return
	}
	if err := d.kernel.SyncHostPorts(ctx, want); err != nil {
		d.kernelHostPortsKnown = false
		d.log.Error(err, "the node's own connections to hostPorts are not served", "table", HostPortTable)
		return
	}
	d.kernelHostPortsDone, d.kernelHostPortsKnown = want, true
}

// hostPortTableKind names HostPortTable in its format set's comment
// ("vcoil vpp-hostports v2", formatversion.KernelTable; format 1 had none).
const hostPortTableKind = "vpp-hostports"

// SyncHostPorts replaces the table HostPortTable in one transaction with
// the DNATs of dnats, or deletes it when there are none; a table of a
// newer format is refused (formatversion.NewerError) and left unchanged.
//
// Replies to a node's connection from 127.0.0.1 come back (un-NATed) to
// 127.0.0.1 on the interconnect: they need route_localnet there, which
// also lets in whatever a pod sends to 127.0.0.0/8 through VPP. So the
// table's input chain drops what arrives on the interconnect for
// 127.0.0.0/8 unless it belongs to a connection the node made, and
// route_localnet is on only while there are hostPorts.
func (k *netlinkKernel) SyncHostPorts(ctx context.Context, dnats []HostPortDNAT) error {
	node, err := k.openNode()
	if err != nil {
		return err
	}
	defer node.Close()
	if _, err := exec.LookPath("nft"); err != nil {
		if len(dnats) == 0 {
			// Without nft, no table was made either.
			return resetRouteLocalnet(node)
		}
		return fmt.Errorf("hostPorts for the node's own processes need nft: %w", err)
	}
	var fill func(*knftables.Transaction)
	if len(dnats) > 0 {
		fill = func(tx *knftables.Transaction) {
			tx.Add(&knftables.Map{Name: "hostports", Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"})
			for _, h := range dnats {
				tx.Add(&knftables.Element{Map: "hostports",
					Key:   []string{h.Addr.String(), strconv.Itoa(int(h.Protocol)), strconv.Itoa(int(h.Port))},
					Value: []string{h.PodAddr.String(), strconv.Itoa(int(h.PodPort))}})
			}
			tx.Add(&knftables.Chain{Name: "output", Type: knftables.PtrTo(knftables.NATType),
				Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
			tx.Add(&knftables.Rule{Chain: "output",
				Rule: "fib daddr type local dnat ip to ip daddr . meta l4proto . th dport map @hostports"})
			tx.Add(&knftables.Chain{Name: "postrouting", Type: knftables.PtrTo(knftables.NATType),
				Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
			tx.Add(&knftables.Rule{Chain: "postrouting",
				Rule: fmt.Sprintf("ip saddr 127.0.0.0/8 ct status dnat oifname %q masquerade", HostInterconnectName)})
			tx.Add(&knftables.Chain{Name: "input", Type: knftables.PtrTo(knftables.FilterType),
				Hook: knftables.PtrTo(knftables.InputHook), Priority: knftables.PtrTo(knftables.FilterPriority)})
			tx.Add(&knftables.Rule{Chain: "input",
				Rule: fmt.Sprintf("iifname %q ip daddr 127.0.0.0/8 ct state != { established, related } drop", HostInterconnectName)})
		}
	}
	// The table before route_localnet, and route_localnet off after it:
	// loopback destinations are never let in unfiltered.
	if err := replaceNodeTable(ctx, node, HostPortTable, hostPortTableKind,
		"vcoil: the node's own connections to hostPorts, which VPP serves", fill); err != nil {
		return err
	}
	if len(dnats) == 0 {
		return resetRouteLocalnet(node)
	}
	return node.SetSysctls(kernelns.Sysctl{Key: routeLocalnet, Value: "1"})
}

// routeLocalnet is the interconnect's route_localnet sysctl.
const routeLocalnet = "net/ipv4/conf/" + HostInterconnectName + "/route_localnet"

// resetRouteLocalnet turns route_localnet off on the interconnect, if it
// exists (a tun goes with VPP, and a new one starts with it off).
func resetRouteLocalnet(node *kernelns.Namespace) error {
	host, err := node.FindLink(HostInterconnectName)
	if err != nil || host == nil {
		return err
	}
	return node.SetSysctls(kernelns.Sysctl{Key: routeLocalnet, Value: "0"})
}
