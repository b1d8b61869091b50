package vpp

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// resync replays the desired state (replay) and records the attempt for
// the node state. The caller holds d.mu.
func (d *driver) resync(ctx context.Context) error {
	start := time.Now()
	err := d.replay(ctx)
	d.recordResync(start, time.Now(), err)
	return err
}

// replay makes VPP and the kernel match the desired state after a
// (re)connection: the node set-up, then every pod (kept when VPP holds it
// as wanted, made again when it is missing or differs, removed when VPP
// holds it unwanted, each with its NAT role), the af_packet veths, the
// blocks' routes, the node interfaces' NAT roles and the service network.
// The ACL lists are not replayed: their indexes died with the old VPP. On the first sync since vcoild started, VPP's
// tagged pods that vcoild does not know are adopted instead of removed:
// the daemon's recovery decides on them through ListPods. A pod that cannot
// be wired (its namespace is gone) is logged and left for its DEL; it does
// not fail the sync. The caller holds d.mu.
func (d *driver) replay(ctx context.Context) error {
	ch := d.ch
	d.node.natEnabled, d.cnatSynced = false, false
	ifs, err := interfaceDump(ch, ^uint32(0))
	if err != nil {
		return fmt.Errorf("list VPP's interfaces: %w", err)
	}
	if err := d.adoptTags(ifs); err != nil {
		return err
	}
	if err := d.ensureNode(ctx, ifs); err != nil {
		return fmt.Errorf("node set-up: %w", err)
	}
	if err := d.ensureGuard(); err != nil {
		return err
	}
	veths, err := d.kernel.PodVeths(ctx)
	if err != nil {
		return err
	}
	routes, err := podRoutesByInterface(ch)
	if err != nil {
		return err
	}
	// Only the first sync adopts pods, and a TAP names an adopted pod's
	// namespace.
	var taps map[uint32]*tapv2.SwInterfaceTapV2Details
	if d.initial {
		if taps, err = tapDump(ch); err != nil {
			return err
		}
	}
	found, err := d.podInterfaces(ifs, veths)
	if err != nil {
		return err
	}
	sources, err := d.readSourceChecks()
	if err != nil {
		return err
	}
	acls, err := interfaceACLs(ch)
	if err != nil {
		return err
	}
	if err := d.syncPodInterfaces(ctx, found, routes, taps, sources, acls); err != nil {
		return err
	}
	// Before new pods are wired: an interface made now may get the
	// sw_if_index of a stale interface's paths.
	if err := d.removeStaleSources(sources); err != nil {
		return fmt.Errorf("source validation: %w", err)
	}
	d.wireMissingPods(ctx)
	if err := d.removeUnwantedVeths(ctx, veths); err != nil {
		return err
	}
	if err := d.syncHostPorts(); err != nil {
		return fmt.Errorf("hostPorts: %w", err)
	}
	d.syncKernelHostPorts(ctx)
	if err := d.syncBlocks(ctx); err != nil {
		return err
	}
	if err := d.applyNodeRoles(); err != nil {
		return err
	}
	if err := d.syncServiceNetwork(ctx); err != nil {
		return fmt.Errorf("route the service network: %w", err)
	}
	return d.syncCnat()
}

// adoptTags checks the tags of VPP's interfaces ifs before anything is
// changed: a tag of a newer format than this vcoild's stops the sync (a
// formatversion.NewerError naming the interface), so that a downgraded vcoild
// does not take a newer vcoild's interfaces for strangers and delete them.
// It then re-tags the interfaces an earlier vcoild tagged in format 1 with
// their current tags, in ifs too: a tag is only a name, and re-tagging
// disturbs no traffic. The caller holds d.mu.
func (d *driver) adoptTags(ifs []vppInterface) error {
	for _, i := range ifs {
		if err := formatversion.CheckTag(fmt.Sprintf("VPP interface %d (%s)", i.swIfIndex, i.name), i.tag); err != nil {
			return err
		}
	}
	for j, i := range ifs {
		t, ok := upgradeTag(i.tag)
		if !ok {
			continue
		}
		if err := tag(d.ch, i.swIfIndex, t); err != nil {
			return err
		}
		d.log.Info("re-tagged an interface of an earlier vcoild in the current format", "vppInterface", i.name, "oldTag", i.tag, "tag", t)
		ifs[j].tag = t
	}
	return nil
}

// podInterfaces returns VPP's pod interfaces by key, from their tags. A
// hashed tag is matched against the keys the driver knows (the desired
// pods', the af_packet veths' aliases). An interface whose hashed tag
// matches none belongs to no pod anyone can name, and a pod has one
// interface: such interfaces, and second ones, are deleted.
func (d *driver) podInterfaces(ifs []vppInterface, veths map[string]dataplane.PodKey) (map[dataplane.PodKey]vppInterface, error) {
	hashed := map[string]dataplane.PodKey{}
	for key := range d.pods {
		hashed[hashedTag(key)] = key
	}
	for _, key := range veths {
		hashed[hashedTag(key)] = key
	}
	found := map[dataplane.PodKey]vppInterface{}
	for _, i := range ifs {
		t, ok := parsePodTag(i.tag)
		if !ok {
			continue
		}
		key := t.key
		if t.hashed {
			if key, ok = hashed[t.tag]; !ok {
				d.log.Info("removing a pod interface whose hashed tag no known key matches", "vppInterface", i.name, "tag", i.tag)
				if err := d.deleteInterface(i); err != nil {
					return nil, err
				}
				continue
			}
		}
		if _, dup := found[key]; dup {
			d.log.Info("removing a second interface of one pod", "vppInterface", i.name, "containerID", key.ContainerID, "ifname", key.IfName)
			if err := d.deleteInterface(i); err != nil {
				return nil, err
			}
			continue
		}
		found[key] = i
	}
	return found, nil
}

// syncPodInterfaces decides, in key order, on each pod interface VPP holds:
// keep it when it is a desired pod wired as wanted, adopt it on the first
// sync when vcoild does not know it, and remove it otherwise (a desired pod
// is then wired again by wireMissingPods). routes are the pod routes
// through each interface; taps, on the first sync, VPP's TAPs; acls the
// interfaces' ACL lists. A pod interface that stays gets the pod guard in
// front of its input list.
func (d *driver) syncPodInterfaces(ctx context.Context, found map[dataplane.PodKey]vppInterface,
	routes map[uint32][]netip.Addr, taps map[uint32]*tapv2.SwInterfaceTapV2Details, sources sourceChecks, acls map[uint32]aclSent) error {
	keys := make([]dataplane.PodKey, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	for _, key := range keys {
		i := found[key]
		have := routes[i.swIfIndex]
		st := d.pods[key]
		switch {
		case st == nil && d.initial:
			if err := d.guardKept(i.swIfIndex, acls[i.swIfIndex]); err != nil {
				return err
			}
			d.adopt(key, i, have, taps[i.swIfIndex])
			if err := d.adoptSourceCheck(i.swIfIndex, d.pods[key].pod, sources); err != nil {
				return err
			}
		case st == nil:
			d.log.Info("removing a pod interface vcoild does not want", "vppInterface", i.name, "containerID", key.ContainerID, "ifname", key.IfName)
			if err := d.removeInterface(ctx, i, key, have); err != nil {
				return err
			}
		default:
			if d.keep(ctx, st, i, have, sources, acls[i.swIfIndex]) {
				continue
			}
			if err := d.removeInterface(ctx, i, key, have); err != nil {
				return err
			}
		}
	}
	return nil
}

// wireMissingPods wires, in key order, the desired pods VPP lacks. A pod
// that fails stays desired and unwired, for its DEL or the next sync: one
// pod whose namespace is gone must not keep the node from being synced.
func (d *driver) wireMissingPods(ctx context.Context) {
	pending := make([]*podState, 0, len(d.pods))
	for _, st := range d.pods {
		if !st.wired {
			pending = append(pending, st)
		}
	}
	slices.SortFunc(pending, func(a, b *podState) int { return compareKeys(a.pod.PodKey, b.pod.PodKey) })
	for _, st := range pending {
		if err := d.wire(ctx, st); err != nil {
			st.failed = err
			d.log.Error(err, "cannot wire a pod during the sync; it stays until its DEL", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName)
			continue
		}
		d.log.Info("pod wired again", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName, "vppInterface", st.vppName)
	}
}

// removeUnwantedVeths deletes the af_packet veths of pods that are not
// desired: they outlive VPP, and nothing else would remove them.
func (d *driver) removeUnwantedVeths(ctx context.Context, veths map[string]dataplane.PodKey) error {
	for name, key := range veths {
		if _, ok := d.pods[key]; !ok {
			if err := d.kernel.DeleteNodeLink(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyNodeRoles gives the node's interfaces their NAT roles, which a
// restarted VPP has forgotten.
func (d *driver) applyNodeRoles() error {
	for iface, role := range d.nodeRoles {
		sw, err := d.nodeInterface(iface)
		if err == nil {
			err = d.applyRole(sw, role, 0)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func compareKeys(a, b dataplane.PodKey) int {
	return cmp.Or(cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.IfName, b.IfName))
}

// keep reports whether VPP's interface i is st's pod wired as wanted, and
// then records it. Its source validation is made to match the pod (an
// earlier vcoild may have had other source prefixes, or none).
func (d *driver) keep(ctx context.Context, st *podState, i vppInterface, have []netip.Addr, sources sourceChecks, acls aclSent) bool {
	want := addrsOf(st.pod.IPv4, st.pod.IPv6)
	slices.SortFunc(have, netip.Addr.Compare)
	slices.SortFunc(want, netip.Addr.Compare)
	if !i.up || !slices.Equal(have, want) {
		return false
	}
	if st.pod.MTU == 0 {
		st.pod.MTU = d.node.mtu
	}
	if st.pod.Netns != "" {
		if err := d.kernel.CheckPod(ctx, st.pod, d.cfg.PodInterface, st.pod.MTU); err != nil {
			d.log.Info("rewiring a pod whose interface differs", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName, "reason", err.Error())
			return false
		}
	}
	if err := d.syncSourceCheck(i.swIfIndex, st.pod, sources, podSources(st.pod)); err != nil {
		d.log.Error(err, "cannot restore the source validation of a pod", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName)
		return false
	}
	if err := d.guardKept(i.swIfIndex, acls); err != nil {
		d.log.Error(err, "cannot put the pod guard on a pod's interface", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName)
		return false
	}
	if st.role != 0 {
		if err := d.applyRole(i.swIfIndex, st.role, 0); err != nil {
			d.log.Error(err, "cannot restore the NAT role of a pod", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName)
			return false
		}
	}
	// Kept up (a down one is wired again): it holds the lists VPP kept.
	st.wired, st.swIfIndex, st.vppName, st.hostMAC, st.failed, st.held = true, i.swIfIndex, i.name, i.mac, nil, false
	if d.initial {
		st.roleUnknown = true
	}
	return true
}

// adopt makes a pod that VPP holds and vcoild does not know desired, with
// the addresses of its routes and, for a TAP, its namespace.
func (d *driver) adopt(key dataplane.PodKey, i vppInterface, have []netip.Addr, tap *tapv2.SwInterfaceTapV2Details) {
	pod := dataplane.Pod{PodKey: key, MTU: i.mtu}
	for _, a := range have {
		if a.Is4() && !pod.IPv4.IsValid() {
			pod.IPv4 = a
		} else if a.Is6() && !pod.IPv6.IsValid() {
			pod.IPv6 = a
		}
	}
	if tap != nil {
		pod.Netns = tap.HostNamespace
		if tap.HostMtuSize != 0 {
			pod.MTU = int(tap.HostMtuSize)
		}
	}
	st := &podState{pod: pod, wired: true, swIfIndex: i.swIfIndex, vppName: i.name, hostMAC: i.mac, roleUnknown: true}
	d.pods[key] = st
	d.log.Info("found a pod in VPP that vcoild did not know", "containerID", key.ContainerID, "ifname", key.IfName,
		"vppInterface", i.name, "ipv4", pod.IPv4, "ipv6", pod.IPv6)
}

// removeInterface deletes a pod interface VPP holds with the routes found
// through it, its source checks, and its veth.
func (d *driver) removeInterface(ctx context.Context, i vppInterface, key dataplane.PodKey, have []netip.Addr) error {
	for _, a := range have {
		if err := delRoute(d.ch, hostPrefix(a), viaPath(i.swIfIndex, a)); err != nil {
			return err
		}
	}
	if err := d.deleteInterface(i); err != nil {
		return err
	}
	if len(i.name) > len("host-") && i.name[:len("host-")] == "host-" {
		return d.kernel.DeleteNodeLink(ctx, linkName(vethPrefix, key))
	}
	return nil
}

// podRoutesByInterface reads VPP's main tables and returns, per
// interface, the host routes (/32, /128) through it to the route's own
// address: the routes SetupPod adds.
func podRoutesByInterface(ch channel) (map[uint32][]netip.Addr, error) {
	out := map[uint32][]netip.Addr{}
	for _, v6 := range []bool{false, true} {
		err := apiRoutes(ch, 0, v6,
			func(r *ip.IPRouteV2) {
				p := fromVPPPrefix(r.Prefix)
				if p.Bits() != p.Addr().BitLen() || len(r.Paths) != 1 {
					return
				}
				path := r.Paths[0]
				if path.Type != fib_types.FIB_API_PATH_TYPE_NORMAL || path.SwIfIndex == ^uint32(0) {
					return
				}
				var nh netip.Addr
				if p.Addr().Is4() {
					nh = netip.AddrFrom4(path.Nh.Address.GetIP4())
				} else {
					nh = netip.AddrFrom16(path.Nh.Address.GetIP6())
				}
				if nh == p.Addr() {
					out[path.SwIfIndex] = append(out[path.SwIfIndex], p.Addr())
				}
			})
		if err != nil {
			return nil, fmt.Errorf("list VPP's routes: %w", err)
		}
	}
	return out, nil
}

func tapDump(ch channel) (map[uint32]*tapv2.SwInterfaceTapV2Details, error) {
	out := map[uint32]*tapv2.SwInterfaceTapV2Details{}
	err := vppapi.Dump(ch, &tapv2.SwInterfaceTapV2Dump{SwIfIndex: index(^uint32(0))},
		func() *tapv2.SwInterfaceTapV2Details { return &tapv2.SwInterfaceTapV2Details{} },
		func(m *tapv2.SwInterfaceTapV2Details) { out[m.SwIfIndex] = m })
	if err != nil {
		return nil, fmt.Errorf("list VPP's TAPs: %w", err)
	}
	return out, nil
}
