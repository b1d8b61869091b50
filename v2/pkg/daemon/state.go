package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// StateSource fills the node state's node subnet, NAT loopback, blocks
// and pods: what IPAM holds in memory and what the checkpoint records.
// The pods' interfaces come from the dataplane (PodInterfaces).
func (d *Daemon) StateSource() nodestate.Source { return d.Server.StateSource() }

// StateSource is the server's part of the node state (Daemon.StateSource).
func (s *Server) StateSource() nodestate.Source {
	return nodestate.SourceFunc(s.fillState)
}

func (s *Server) fillState(_ context.Context, st *nodestate.State) error {
	sub := s.ipam.NodeSubnet()
	st.NodeSubnet = prefixesOf(sub.IPv4, sub.IPv6)
	l := s.ipam.NATLoopback()
	st.NATLoopback = addrsOf(l.IPv4, l.IPv6)
	for _, b := range s.ipam.Blocks() {
		st.Blocks = append(st.Blocks, nodestate.Block{
			Name: b.Name, Pool: b.Pool, Prefixes: prefixesOf(b.Block.IPv4, b.Block.IPv6),
			NodeSubnet: b.NodeSubnet, Draining: b.Draining, InUse: b.InUse, Free: b.Free,
		})
	}
	// Entries that cannot be read are named in the error; the others are
	// served.
	entries, err := s.store.Load()
	for _, e := range entries {
		st.Pods = append(st.Pods, podStateOf(e))
	}
	slices.SortFunc(st.Pods, func(a, b nodestate.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.IfName, b.IfName))
	})
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.store.Dir(), err)
	}
	return nil
}

func podStateOf(e checkpoint.Entry) nodestate.Pod {
	return nodestate.Pod{
		Namespace: e.Namespace, Name: e.Name, ContainerID: e.ContainerID, IfName: e.IfName, Netns: e.Netns,
		IPs: addrsOf(e.IPv4, e.IPv6), Pool: e.Pool, Block: e.Block, Created: e.Created,
	}
}

// InterfaceLister is what the node state needs from a dataplane: the node
// side of each pod interface it holds (the Linux dataplane's veths, VPP's
// interfaces).
type InterfaceLister interface {
	PodInterfaces(ctx context.Context) (map[dataplane.PodKey]nodestate.Interface, error)
}

// PodInterfaces is a node state source that gives the pods filled before
// it (StateSource) their dataplane interface. Pods the dataplane does not
// hold keep none and are named in one error: a pod vcoild gave an address
// to whose wiring is gone is what an operator looks for.
func PodInterfaces(l InterfaceLister) nodestate.Source {
	return nodestate.SourceFunc(func(ctx context.Context, st *nodestate.State) error {
		ifs, err := l.PodInterfaces(ctx)
		if err != nil {
			return err
		}
		var missing []string
		for i := range st.Pods {
			p := &st.Pods[i]
			iface, ok := ifs[dataplane.PodKey{ContainerID: p.ContainerID, IfName: p.IfName}]
			if !ok {
				missing = append(missing, podName(*p))
				continue
			}
			p.Interface = &iface
		}
		if len(missing) > 0 {
			return fmt.Errorf("the dataplane holds no interface for %d pods: %s", len(missing), strings.Join(missing, ", "))
		}
		return nil
	})
}

// podName is "namespace/name (containerID/ifname)", or the key alone for
// an entry without a pod name.
func podName(p nodestate.Pod) string {
	k := p.ContainerID + "/" + p.IfName
	if p.Name == "" {
		return k
	}
	return p.Namespace + "/" + p.Name + " (" + k + ")"
}

func prefixesOf(ps ...netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

func addrsOf(as ...netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}
