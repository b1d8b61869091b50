package vpp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/af_packet"
	"go.fd.io/govpp/binapi/ethernet_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/ip_neighbor"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// maxNamespace is what TapCreateV3's host_namespace (string[64]) holds.
const maxNamespace = 63

// tapRequest is the TapCreateV3 of a tun named ifName in netns (VPP's own
// namespace when empty). GoVPP does not apply the API's defaults, so every
// field VPP reads is set.
func (d *driver) tapRequest(t, ifName, netns string, mtu int) *tapv2.TapCreateV3 {
	req := &tapv2.TapCreateV3{
		ID: ^uint32(0), UseRandomMac: true,
		NumRxQueues: 1, NumTxQueues: 1, TxRingSz: 256, RxRingSz: 256,
		HostMtuSet: true, HostMtuSize: uint32(mtu),
		TapFlags:      tapv2.TAP_API_FLAG_TUN,
		HostIfNameSet: true, HostIfName: ifName,
		Tag: t,
	}
	if d.cfg.GSO {
		req.TapFlags |= tapv2.TAP_API_FLAG_GSO
	}
	if netns != "" {
		req.HostNamespaceSet, req.HostNamespace = true, netns
	}
	return req
}

// The rings of af_packet interfaces. VPP 25.10 opens them TPACKET_V3 by
// default, whose receive blocks the kernel hands over only when they are
// full or after a 1 ms timeout: with VPP woken by the socket (interrupt
// mode), every receive hop of a lone packet waited for that timeout, and a
// round trip between two pods cost 1 to 3 ms. TPACKET_V2
// (AF_PACKET_API_FLAG_VERSION_2) hands over each frame as it is written.
//
// A V2 frame holds one packet, and a veth passes its peer's TSO packets
// on unsegmented, up to 64 KiB: a frame smaller than that truncates them
// on receive (VPP drops the partial packet), and on transmit VPP copies
// each packet into one frame without checking its size, so a larger one
// runs into the next frame, the kernel stops at the garbage and the ring
// never moves again (every later packet counts as "tx frame not ready").
// So every frame holds a 64 KiB GSO packet, as VPP's own default.
//
// The kernel allocates and zeroes each ring at the pod's creation, which
// is most of the time a VPP pod's ADD takes, and its memory is the pod's
// cost on the node. VPP gives a V2 ring one block of all its frames, and
// the kernel rounds a block up to a power of two pages: 128 frames of
// 66 KiB (8.25 MiB) take 16 MiB. 62 frames fill 4 MiB, 8 MiB per pod
// (VPP 25.10's V3 defaults took 10 MiB to receive, and vcoil's 64 KiB
// transmit frames 16 MiB more). 62 frames hold 62 packets of any size:
// VPP sends a ring's frames to the kernel at the end of each vector and
// gets them back at once (a veth's peer in another namespace frees them
// as it takes them), and reads the receive ring whenever the socket wakes
// it.
const (
	afPacketFrameSize = 2048 * 33
	afPacketFrames    = 62
	// The host interconnect carries all of the node's own traffic to and
	// from pods and Services: one per node, it gets more frames (496 fill
	// 32 MiB per ring).
	afPacketHostFrames = 496
)

// createAfPacket attaches VPP to the host link hostIf (TPACKET_V2, frames
// of afPacketFrameSize, that many in each ring); mac nil lets VPP choose.
// CKSUM_GSO makes VPP complete the checksums that veths leave to offload
// and pass GSO packets on whole.
func createAfPacket(ch channel, hostIf string, mac net.HardwareAddr, frames uint32) (uint32, error) {
	req := &af_packet.AfPacketCreateV3{
		Mode: af_packet.AF_PACKET_API_MODE_ETHERNET, HostIfName: hostIf,
		UseRandomHwAddr: mac == nil,
		RxFrameSize:     afPacketFrameSize, RxFramesPerBlock: frames,
		TxFrameSize: afPacketFrameSize, TxFramesPerBlock: frames,
		Flags: af_packet.AF_PACKET_API_FLAG_QDISC_BYPASS | af_packet.AF_PACKET_API_FLAG_CKSUM_GSO |
			af_packet.AF_PACKET_API_FLAG_VERSION_2,
		NumRxQueues: 1, NumTxQueues: 1,
	}
	if mac != nil {
		req.HwAddr = ethernet_types.NewMacAddress(mac)
	}
	reply := &af_packet.AfPacketCreateV3Reply{}
	if err := vppapi.Call(ch, req, reply); err != nil {
		return 0, err
	}
	return uint32(reply.SwIfIndex), nil
}

// SetupPod wires pod, or leaves it as it is when it is wired as asked. It
// waits (at most Config.ReadyWait) while VPP is not synced and then fails
// with ErrNotReady, changing nothing.
func (d *driver) SetupPod(ctx context.Context, pod dataplane.Pod) (dataplane.Interfaces, error) {
	if err := validatePod(pod); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	if err := d.lockReady(ctx); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	defer d.mu.Unlock()
	if pod.MTU == 0 {
		pod.MTU = d.node.mtu
	}
	st := d.pods[pod.PodKey]
	if st != nil && st.wired && samePod(st.pod, pod) {
		if err := d.checkWired(ctx, st); err == nil {
			st.pod.Namespace, st.pod.Name = pod.Namespace, pod.Name
			if !slices.Equal(st.pod.SourcePrefixes, pod.SourcePrefixes) {
				if err := d.updateSourceCheck(st.swIfIndex, pod); err != nil {
					return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
				}
				st.pod.SourcePrefixes = slices.Clone(pod.SourcePrefixes)
			}
			if len(pod.PortMappings) > 0 || len(st.pod.PortMappings) > 0 || len(st.hostPorts) > 0 {
				if err := d.setHostPorts(st, pod.PortMappings); err != nil {
					return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
				}
				d.syncKernelHostPorts(ctx)
			}
			return st.interfaces(d.cfg.PodInterface), nil
		} else {
			d.log.Info("rewiring pod", "containerID", pod.ContainerID, "ifname", pod.IfName, "reason", err.Error())
		}
	}
	var role NATRole
	if st != nil {
		role = st.role &^ d.hostPortRole(st.pod)
	}
	if d.podRolesKnown {
		role = d.podRole(pod)
	} else {
		role |= d.hostPortRole(pod) | d.cnatFrontendRole()
	}
	if st != nil {
		if err := d.unwire(ctx, st); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: remove its old wiring: %w", describe(pod.PodKey), err)
		}
		delete(d.pods, pod.PodKey)
	}
	nst := &podState{pod: pod, role: role}
	if err := d.wire(ctx, nst); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	if len(pod.PortMappings) > 0 {
		// After the interface and its routes, before ADD returns: a
		// failure undoes the pod whole.
		if err := d.setHostPorts(nst, pod.PortMappings); err != nil {
			if uerr := d.unwire(ctx, nst); uerr != nil {
				err = errors.Join(err, fmt.Errorf("remove the pod's wiring: %w", uerr))
			}
			return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
		}
	}
	d.pods[pod.PodKey] = nst
	if len(pod.PortMappings) > 0 || (st != nil && len(st.pod.PortMappings) > 0) {
		d.syncKernelHostPorts(ctx)
		d.syncCnatFrontends()
	}
	d.log.Info("pod wired", "containerID", pod.ContainerID, "ifname", pod.IfName, "vppInterface", nst.vppName,
		"swIfIndex", nst.swIfIndex, "ipv4", pod.IPv4, "ipv6", pod.IPv6, "mtu", pod.MTU, "type", d.cfg.PodInterface)
	return nst.interfaces(d.cfg.PodInterface), nil
}

// samePod: the wiring SetupPod makes depends on these fields only.
func samePod(a, b dataplane.Pod) bool {
	return a.PodKey == b.PodKey && a.Netns == b.Netns && a.IPv4 == b.IPv4 && a.IPv6 == b.IPv6 && a.MTU == b.MTU &&
		a.NoChecksumOffload == b.NoChecksumOffload
}

func (st *podState) interfaces(typ InterfaceType) dataplane.Interfaces {
	ifs := dataplane.Interfaces{HostIfName: st.vppName, HostMAC: st.hostMAC, MTU: st.pod.MTU}
	if typ == AFPacket {
		ifs.PodMAC = podMAC(st.pod.PodKey).String()
	}
	return ifs
}

// undo is a stack of the steps that undo a half-made wiring.
type undo []func() error

func (u *undo) push(f func() error) { *u = append(*u, f) }

func (u undo) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		if err := u[i](); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wire creates the pod's interface in VPP and in its namespace, then its
// routes, in an order in which every step finds what it needs. On an
// error it undoes what it made, so nothing half-made is left. The caller
// holds d.mu.
func (d *driver) wire(ctx context.Context, st *podState) (err error) {
	ch, pod, key := d.ch, st.pod, st.pod.PodKey
	var u undo
	defer func() {
		if err != nil {
			if uerr := u.run(); uerr != nil {
				d.log.Error(uerr, "removing a half-made pod wiring failed", "containerID", key.ContainerID, "ifname", key.IfName)
				err = errors.Join(err, fmt.Errorf("remove the half-made wiring: %w", uerr))
			}
		}
	}()

	var sw uint32
	switch d.cfg.PodInterface {
	case TAP:
		if pod.Netns == "" {
			return errors.New("the pod's network namespace is unknown: its TAP cannot be made again")
		}
		hostIf, netns := pod.IfName, pod.Netns
		moved := len(pod.Netns) > maxNamespace
		if moved {
			// VPP cannot take the path: make the tun in the node namespace
			// under a unique name and move it.
			hostIf, netns = linkName(tapPrefix, key), d.cfg.NodeNetns
		}
		reply := &tapv2.TapCreateV3Reply{}
		if err := vppapi.Call(ch, d.tapRequest(podTag(key), hostIf, netns, pod.MTU), reply); err != nil {
			return fmt.Errorf("create TAP %s in %s: %w", hostIf, orVPPs(netns), err)
		}
		sw = uint32(reply.SwIfIndex)
		u.push(func() error { return deleteTap(ch, sw) })
		if moved {
			if err := d.kernel.MoveToPod(ctx, hostIf, pod); err != nil {
				return fmt.Errorf("move the TAP into the pod: %w", err)
			}
		}
	case AFPacket:
		veth := linkName(vethPrefix, key)
		if err := d.kernel.CreatePodVeth(ctx, pod, veth, podMAC(key), pod.MTU); err != nil {
			return fmt.Errorf("create the pod's veth: %w", err)
		}
		u.push(func() error { return d.kernel.DeleteNodeLink(ctx, veth) })
		s, err := createAfPacket(ch, veth, podMAC(key), afPacketFrames)
		if err != nil {
			return fmt.Errorf("attach %s with af_packet: %w", veth, err)
		}
		sw = s
		u.push(func() error { return deleteAfPacket(ch, veth) })
		if err := tag(ch, sw, podTag(key)); err != nil {
			return err
		}
	}
	if err := d.finishWiring(ctx, st, sw, &u); err != nil {
		return err
	}
	return nil
}

// finishWiring does what both interface types need once VPP's end exists:
// the VPP side, the pod side, then the routes to the pod, so that the pod
// becomes reachable when it is ready.
func (d *driver) finishWiring(ctx context.Context, st *podState, sw uint32, u *undo) error {
	ch, pod := d.ch, st.pod
	req := &interfaces.SwInterfaceSetUnnumbered{SwIfIndex: index(d.node.loopback), UnnumberedSwIfIndex: index(sw), IsAdd: true}
	if err := vppapi.Call(ch, req, &interfaces.SwInterfaceSetUnnumberedReply{}); err != nil {
		return fmt.Errorf("make interface %d unnumbered to vcoil's loopback: %w", sw, err)
	}
	// Before the interface is up: no packet of the pod's passes unchecked
	// or past the ACLs its owners set.
	if err := d.enableSourceCheck(sw, pod, u); err != nil {
		return err
	}
	if err := d.applyPodACLs(st, sw); err != nil {
		return err
	}
	// Held: left down until ReleasePods (hold.go); the rest below works
	// on a down interface.
	held := d.holding()
	if !held {
		if err := setUp(ch, sw, fmt.Sprintf("interface %d", sw)); err != nil {
			return err
		}
	}
	// An adopted af_packet pod has no known namespace; its veth, and so the
	// pod's side, outlived VPP.
	if pod.Netns != "" {
		if err := d.kernel.ConfigurePod(ctx, pod); err != nil {
			return fmt.Errorf("configure the pod's interface: %w", err)
		}
	}
	for _, a := range addrsOf(pod.IPv4, pod.IPv6) {
		if d.cfg.PodInterface == AFPacket {
			if err := neighbor(ch, true, sw, a, podMAC(pod.PodKey)); err != nil {
				return err
			}
			u.push(func() error { return neighbor(ch, false, sw, a, podMAC(pod.PodKey)) })
		}
		if err := addRoute(ch, hostPrefix(a), viaPath(sw, a)); err != nil {
			return err
		}
		u.push(func() error { return delRoute(ch, hostPrefix(a), viaPath(sw, a)) })
	}
	if st.role != 0 {
		if err := d.applyRole(sw, st.role, 0); err != nil {
			return err
		}
		u.push(func() error { return d.applyRole(sw, 0, st.role) })
	}
	if d.cnat != nil {
		if err := d.cnatPod(sw, true); err != nil {
			return err
		}
		u.push(func() error { return d.cnatPod(sw, false) })
	}
	ifs, err := interfaceDump(ch, sw)
	if err != nil {
		return fmt.Errorf("read back interface %d: %w", sw, err)
	}
	if len(ifs) != 1 {
		return fmt.Errorf("read back interface %d: VPP returned %d interfaces", sw, len(ifs))
	}
	st.swIfIndex, st.vppName, st.hostMAC, st.wired, st.failed, st.held = sw, ifs[0].name, ifs[0].mac, true, nil, held
	return nil
}

func orVPPs(netns string) string {
	if netns == "" {
		return "VPP's network namespace"
	}
	return netns
}

// neighbor adds (or deletes) the static neighbor of an af_packet pod's
// address; its route is ours, hence NO_FIB_ENTRY.
func neighbor(ch channel, add bool, sw uint32, a netip.Addr, mac net.HardwareAddr) error {
	req := &ip_neighbor.IPNeighborAddDel{IsAdd: add, Neighbor: ip_neighbor.IPNeighbor{
		SwIfIndex: index(sw), Flags: ip_neighbor.IP_API_NEIGHBOR_FLAG_STATIC | ip_neighbor.IP_API_NEIGHBOR_FLAG_NO_FIB_ENTRY,
		MacAddress: ethernet_types.NewMacAddress(mac), IPAddress: vppAddress(a),
	}}
	err := vppapi.Call(ch, req, &ip_neighbor.IPNeighborAddDelReply{})
	if !add {
		err = vppapi.IgnoreRetval(err, api.NO_SUCH_ENTRY, api.INVALID_SW_IF_INDEX)
	}
	if err != nil {
		return fmt.Errorf("neighbor %s on interface %d: %w", a, sw, err)
	}
	return nil
}

func deleteTap(ch channel, sw uint32) error {
	err := vppapi.IgnoreRetval(vppapi.Call(ch, &tapv2.TapDeleteV2{SwIfIndex: index(sw)}, &tapv2.TapDeleteV2Reply{}), api.INVALID_SW_IF_INDEX, api.NO_SUCH_ENTRY)
	if err != nil {
		return fmt.Errorf("delete TAP %d: %w", sw, err)
	}
	return nil
}

func deleteAfPacket(ch channel, hostIf string) error {
	err := vppapi.IgnoreRetval(vppapi.Call(ch, &af_packet.AfPacketDelete{HostIfName: hostIf}, &af_packet.AfPacketDeleteReply{}),
		api.INVALID_SW_IF_INDEX, api.NO_SUCH_ENTRY, api.INVALID_INTERFACE)
	if err != nil {
		return fmt.Errorf("delete af_packet interface on %s: %w", hostIf, err)
	}
	return nil
}

// unwire removes a pod's wiring: its NAT roles, routes and neighbors, then
// its interface (and with it the pod's tun, or the veth). What is already
// gone is no error. The caller holds d.mu.
func (d *driver) unwire(ctx context.Context, st *podState) error {
	if !st.wired {
		return d.removeLeftovers(ctx, st.pod.PodKey)
	}
	ch, pod, sw := d.ch, st.pod, st.swIfIndex
	var errs []error
	if err := d.removeHostPorts(st); err != nil {
		errs = append(errs, err)
	}
	if st.role != 0 {
		if err := d.applyRole(sw, 0, st.role); err != nil {
			errs = append(errs, err)
		}
	}
	// cnat's bitmap of pod interfaces would keep the index for the next
	// interface that gets it.
	if err := d.cnatPod(sw, false); err != nil {
		errs = append(errs, err)
	}
	for _, a := range addrsOf(pod.IPv4, pod.IPv6) {
		if err := delRoute(ch, hostPrefix(a), viaPath(sw, a)); err != nil {
			errs = append(errs, err)
		}
		if d.cfg.PodInterface == AFPacket {
			if err := neighbor(ch, false, sw, a, podMAC(pod.PodKey)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := d.dropSourceCheck(sw); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := d.deleteVPPInterface(vppInterface{swIfIndex: sw, name: st.vppName}); err != nil {
		return err
	}
	st.wired = false
	if d.cfg.PodInterface == AFPacket {
		return d.kernel.DeleteNodeLink(ctx, linkName(vethPrefix, pod.PodKey))
	}
	return nil
}

// removeLeftovers deletes what carries the pod's key without being known
// as wired: a tagged VPP interface and the af_packet veth. Routes through
// a deleted interface go with it.
func (d *driver) removeLeftovers(ctx context.Context, key dataplane.PodKey) error {
	ifs, err := interfaceDump(d.ch, ^uint32(0))
	if err != nil {
		return err
	}
	t := podTag(key)
	for _, i := range ifs {
		if i.tag != t {
			continue
		}
		if err := d.deleteInterface(i); err != nil {
			return err
		}
	}
	if d.cfg.PodInterface == AFPacket {
		return d.kernel.DeleteNodeLink(ctx, linkName(vethPrefix, key))
	}
	return nil
}

// deleteInterface deletes a pod interface of either type whose pod is not
// known, with its source checks.
func (d *driver) deleteInterface(i vppInterface) error {
	if err := d.dropSourceCheck(i.swIfIndex); err != nil {
		return err
	}
	return d.deleteVPPInterface(i)
}

// deleteVPPInterface deletes a pod interface of either type, by its name.
func (d *driver) deleteVPPInterface(i vppInterface) error {
	if len(i.name) > len("host-") && i.name[:len("host-")] == "host-" {
		return deleteAfPacket(d.ch, i.name[len("host-"):])
	}
	return deleteTap(d.ch, i.swIfIndex)
}

// TeardownPod removes everything SetupPod made for pod.PodKey. It needs
// neither the namespace nor the addresses, and succeeds when nothing is
// left. While VPP is not synced it waits, then fails with ErrNotReady.
func (d *driver) TeardownPod(ctx context.Context, pod dataplane.Pod) error {
	if err := validateKey(pod.PodKey); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	defer d.mu.Unlock()
	st := d.pods[pod.PodKey]
	if st == nil {
		st = &podState{pod: pod}
	}
	if err := d.unwire(ctx, st); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	delete(d.pods, pod.PodKey)
	if len(st.pod.PortMappings) > 0 {
		d.syncKernelHostPorts(ctx)
		d.syncCnatFrontends()
	}
	d.log.Info("pod torn down", "containerID", pod.ContainerID, "ifname", pod.IfName)
	return nil
}

// CheckPod compares VPP and the pod's namespace with what SetupPod makes.
func (d *driver) CheckPod(ctx context.Context, pod dataplane.Pod) error {
	if err := validatePod(pod); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	defer d.mu.Unlock()
	st := d.pods[pod.PodKey]
	if pod.MTU == 0 {
		pod.MTU = d.node.mtu
	}
	switch {
	case st == nil:
		return fmt.Errorf("check pod %s: vcoil's VPP dataplane does not hold it", describe(pod.PodKey))
	case !samePod(st.pod, pod):
		return fmt.Errorf("check pod %s: wired with netns %q, addresses %s %s, MTU %d; want %q, %s %s, %d", describe(pod.PodKey),
			st.pod.Netns, st.pod.IPv4, st.pod.IPv6, st.pod.MTU, pod.Netns, pod.IPv4, pod.IPv6, pod.MTU)
	case !st.wired:
		return fmt.Errorf("check pod %s: not wired in VPP: %v", describe(pod.PodKey), st.failed)
	}
	if err := d.checkWired(ctx, st); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	if st.held {
		return fmt.Errorf("check pod %s: VPP interface %s is held down until the network policies are in VPP (incarnation %d)",
			describe(pod.PodKey), st.vppName, d.incarnation)
	}
	if err := d.checkHostPorts(st, pod.PortMappings); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	if err := d.checkSourceCheck(st.swIfIndex); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	return nil
}

// checkWired reads back the pod's interface in VPP and in its namespace.
func (d *driver) checkWired(ctx context.Context, st *podState) error {
	ifs, err := interfaceDump(d.ch, st.swIfIndex)
	if err != nil && !vppapi.IsRetval(err, api.INVALID_SW_IF_INDEX) {
		return err
	}
	switch {
	case len(ifs) != 1 || ifs[0].tag != podTag(st.pod.PodKey):
		return fmt.Errorf("VPP interface %d (%s) is gone", st.swIfIndex, st.vppName)
	case !ifs[0].up && !st.held:
		return fmt.Errorf("VPP interface %s is down", st.vppName)
	}
	return d.kernel.CheckPod(ctx, st.pod, d.cfg.PodInterface, st.pod.MTU)
}

// validatePod rejects what SetupPod could not wire, naming the field.
func validatePod(pod dataplane.Pod) error {
	if err := validateKey(pod.PodKey); err != nil {
		return err
	}
	if err := pod.Validate(); err != nil {
		return err
	}
	if pod.MTU != 0 && (pod.MTU < 576 || pod.MTU > 9000) {
		return fmt.Errorf("MTU %d: want 576..9000", pod.MTU)
	}
	return nil
}
