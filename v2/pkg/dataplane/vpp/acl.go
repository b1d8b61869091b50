package vpp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// maxACLs is what an interface's ACL list holds, input and output
// together (its count is a u8).
const maxACLs = 255

// aclWindow is how many ACLInterfaceSetACLList requests are in flight at
// once on the driver's channel: a batch is pipelined, but never beyond what
// GoVPP's default reply queue holds.
const aclWindow = 64

// ACLLists are one owner's ACLs on one interface, each list in the order
// VPP applies it: Input to the packets VPP receives on the interface,
// Output to those it sends there.
type ACLLists struct {
	Input, Output []uint32
}

func (l ACLLists) empty() bool { return len(l.Input) == 0 && len(l.Output) == 0 }

// ACLInterface names an interface whose ACL lists the driver owns: one of
// the node's (Node), or the interface of the local pod that holds the
// address Pod. Exactly one of the two is set.
type ACLInterface struct {
	Node NodeInterface
	Pod  netip.Addr
}

func (i ACLInterface) String() string {
	if i.Pod.IsValid() {
		return "pod " + i.Pod.String() + "'s"
	}
	return "the " + string(i.Node)
}

// ACLSetting is one owner's lists for one interface.
type ACLSetting struct {
	Interface ACLInterface
	Lists     ACLLists
}

// aclSent is the merged list sent to an interface in this incarnation.
type aclSent struct {
	sw            uint32
	input, output []uint32
}

// SetInterfaceACLs records owner's input ACLs on iface, keeping the
// owner's output ACLs there, and sends the interface's merged list when it
// differs from the one sent in this incarnation (see SetACLLists).
func (d *driver) SetInterfaceACLs(ctx context.Context, inc Incarnation, iface NodeInterface, owner ACLOwner, input []uint32) error {
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set the input ACLs of the %s interface: %w", iface, err)
	}
	defer d.mu.Unlock()
	target := ACLInterface{Node: iface}
	lists := ACLLists{Input: input, Output: d.acls[target][owner].Output}
	if err := d.setACLLists(inc, owner, []ACLSetting{{Interface: target, Lists: lists}}); err != nil {
		return fmt.Errorf("set the input ACLs of the %s interface: %w", iface, err)
	}
	return nil
}

// SetACLLists records owner's lists on each setting's interface and sends
// the interfaces' merged lists (every owner's, in aclOwnerOrder, input then
// output) that differ from those sent in this
// incarnation, pipelined in one batch. The first list set on an interface
// in an incarnation is sent whatever it is, so that what an earlier vcoild
// left there is replaced: owners set their lists (empty ones too) at each
// resync. A pod that is not wired yet gets its lists when it is; lists of
// an address no owner restricts any more are forgotten. Nothing is
// recorded when a setting is refused (a stale incarnation, an unknown
// owner or node interface, more than 255 ACLs on one interface); when VPP
// refuses a list, the others are still sent and that interface's list is
// sent again on the next call.
func (d *driver) SetACLLists(ctx context.Context, inc Incarnation, owner ACLOwner, settings []ACLSetting) error {
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set the ACL lists of %d interfaces: %w", len(settings), err)
	}
	defer d.mu.Unlock()
	return d.setACLLists(inc, owner, settings)
}

// setACLLists is SetACLLists; the caller holds d.mu.
func (d *driver) setACLLists(inc Incarnation, owner ACLOwner, settings []ACLSetting) error {
	if owner != ACLPolicy && owner != ACLServices {
		return fmt.Errorf("unknown ACL owner %d", owner)
	}
	if inc != d.incarnation {
		return fmt.Errorf("incarnation %d is stale, VPP is in incarnation %d: resync", inc, d.incarnation)
	}
	type pending struct {
		target ACLInterface
		owners map[ACLOwner]ACLLists
		sw     uint32
		wired  bool
		in     []uint32
		out    []uint32
	}
	todo := make([]pending, 0, len(settings))
	seen := make(map[ACLInterface]bool, len(settings))
	for _, s := range settings {
		t := s.Interface
		if t.Pod.IsValid() == (t.Node != "") {
			return fmt.Errorf("ACL lists for %+v: name a node interface or a pod's address", t)
		}
		if seen[t] {
			return fmt.Errorf("ACL lists for %s interface: set twice in one batch", t)
		}
		seen[t] = true
		p := pending{target: t}
		if t.Node != "" {
			sw, err := d.nodeInterface(t.Node)
			if err != nil {
				return err
			}
			p.sw, p.wired = sw, true
		} else if st := d.podByAddr(t.Pod); st != nil {
			p.sw, p.wired = st.swIfIndex, true
		}
		p.owners = maps.Clone(d.acls[t])
		if p.owners == nil {
			p.owners = map[ACLOwner]ACLLists{}
		}
		p.owners[owner] = ACLLists{Input: slices.Clone(s.Lists.Input), Output: slices.Clone(s.Lists.Output)}
		p.in, p.out = mergeACLs(p.owners)
		if t.Pod.IsValid() {
			p.in = d.guard.podInput(p.in)
		}
		if n := len(p.in) + len(p.out); n > maxACLs {
			guard := ""
			if t.Pod.IsValid() {
				guard = " with the pod guard's"
			}
			return fmt.Errorf("%s interface: %d ACLs (%d input%s, %d output), VPP takes at most %d", t, n, len(p.in), guard, len(p.out), maxACLs)
		}
		todo = append(todo, p)
	}
	var send []int
	for i, p := range todo {
		d.recordACLs(p.target, p.owners)
		if !p.wired {
			continue
		}
		sent, known := d.aclsSent[p.target]
		if known && sent.sw == p.sw && slices.Equal(sent.input, p.in) && slices.Equal(sent.output, p.out) {
			continue
		}
		send = append(send, i)
	}
	// Each interface's requests: its list, or, when only its output list
	// changed, additions and removals on that side.
	type request struct {
		p   int // in todo
		msg api.Message
	}
	var reqs []request
	for _, i := range send {
		p := todo[i]
		sent, known := d.aclsSent[p.target]
		for _, m := range aclRequests(sent, known && sent.sw == p.sw, p.sw, p.in, p.out) {
			reqs = append(reqs, request{p: i, msg: m})
		}
	}
	failed := map[int]error{}
	for start := 0; start < len(reqs); start += aclWindow {
		batch := reqs[start:min(start+aclWindow, len(reqs))]
		ctxs := make([]api.RequestCtx, len(batch))
		for j, r := range batch {
			ctxs[j] = d.ch.SendRequest(r.msg)
		}
		for j, r := range batch {
			var reply api.Message = &acl.ACLInterfaceSetACLListReply{}
			if _, ok := r.msg.(*acl.ACLInterfaceAddDel); ok {
				reply = &acl.ACLInterfaceAddDelReply{}
			}
			if err := ctxs[j].ReceiveReply(reply); err != nil && failed[r.p] == nil {
				failed[r.p] = &vppapi.Error{Msg: r.msg.GetMessageName(), Err: err}
			}
		}
	}
	var errs []error
	for _, i := range send {
		p := todo[i]
		if err := failed[i]; err != nil {
			delete(d.aclsSent, p.target)
			errs = append(errs, fmt.Errorf("set the ACL lists of %s interface (%d) to input %v, output %v: %w", p.target, p.sw, p.in, p.out, err))
			continue
		}
		d.aclsSent[p.target] = aclSent{sw: p.sw, input: p.in, output: p.out}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if owner == ACLPolicy {
		// The policies are in this incarnation: its held pods may come up
		// (ReleasePods).
		d.policiesIn = inc
	}
	return nil
}

// aclRequests are the requests that change an interface's lists from sent
// (when known) to in and out. When only the output list changes and VPP's
// own edits reach it (acl_interface_add_del appends, and a removal moves
// the last ACL into the removed one's place), they are additions, then
// removals, on the output side: VPP then starts a new policy epoch on the
// output side alone, where acl_interface_set_acl_list starts one on both,
// and with session reclassification on the sessions the input side
// recorded (the pod's own connections) live on (docs/policy.md#vpp-acls).
// Otherwise it is the whole list.
func aclRequests(sent aclSent, known bool, sw uint32, in, out []uint32) []api.Message {
	if !known || !slices.Equal(sent.input, in) {
		return []api.Message{aclListRequest(sw, in, out)}
	}
	var msgs []api.Message
	cur := slices.Clone(sent.output)
	for _, x := range out {
		if !slices.Contains(cur, x) {
			cur = append(cur, x)
			msgs = append(msgs, &acl.ACLInterfaceAddDel{IsAdd: true, SwIfIndex: index(sw), ACLIndex: x})
		}
	}
	for _, x := range sent.output {
		if slices.Contains(out, x) {
			continue
		}
		i := slices.Index(cur, x)
		cur[i] = cur[len(cur)-1]
		cur = cur[:len(cur)-1]
		msgs = append(msgs, &acl.ACLInterfaceAddDel{IsAdd: false, SwIfIndex: index(sw), ACLIndex: x})
	}
	if !slices.Equal(cur, out) {
		return []api.Message{aclListRequest(sw, in, out)}
	}
	return msgs
}

// recordACLs keeps the owners' lists of target as desired state; a pod's
// entry goes when no owner has ACLs for it.
func (d *driver) recordACLs(target ACLInterface, owners map[ACLOwner]ACLLists) {
	if target.Pod.IsValid() {
		used := false
		for _, l := range owners {
			used = used || !l.empty()
		}
		if !used {
			delete(d.acls, target)
			return
		}
	}
	d.acls[target] = owners
}

func aclListRequest(sw uint32, in, out []uint32) *acl.ACLInterfaceSetACLList {
	all := append(slices.Clip(slices.Clone(in)), out...)
	if all == nil {
		all = []uint32{}
	}
	return &acl.ACLInterfaceSetACLList{SwIfIndex: index(sw), Count: uint8(len(all)), NInput: uint8(len(in)), Acls: all}
}

// aclOwnerOrder is the order of the owners' ACLs in an interface's lists.
// The services' source-ranges ACL comes first: it denies some sources and
// ends with the reflective rules, where the policies' reflective ACL
// permits everything, so behind that ACL it would never be reached.
var aclOwnerOrder = [...]ACLOwner{ACLServices, ACLPolicy}

// mergeACLs is the interface's lists: the owners' ACLs in aclOwnerOrder,
// each owner's in its own order.
func mergeACLs(owners map[ACLOwner]ACLLists) (in, out []uint32) {
	in, out = []uint32{}, []uint32{}
	for _, o := range aclOwnerOrder {
		in = append(in, owners[o].Input...)
		out = append(out, owners[o].Output...)
	}
	return in, out
}

// podByAddr is the wired pod holding a, or nil. The caller holds d.mu.
func (d *driver) podByAddr(a netip.Addr) *podState {
	for _, st := range d.pods {
		if st.wired && (st.pod.IPv4 == a || st.pod.IPv6 == a) {
			return st
		}
	}
	return nil
}

// applyPodACLs sends the pod guard and the lists the owners set for the
// pod's addresses to its new interface sw, before the interface is up and
// the routes make the pod reachable: an isolated pod never forwards
// without its ACLs. The caller holds d.mu.
func (d *driver) applyPodACLs(st *podState, sw uint32) error {
	if !d.guard.ok {
		return errors.New("the pod guard's ACLs are not in VPP yet")
	}
	addrs := addrsOf(st.pod.IPv4, st.pod.IPv6)
	target := ACLInterface{Pod: addrs[0]}
	var in, out []uint32
	for _, a := range addrs {
		if owners, ok := d.acls[ACLInterface{Pod: a}]; ok {
			target = ACLInterface{Pod: a}
			in, out = mergeACLs(owners)
			break
		}
	}
	in = d.guard.podInput(in)
	if err := vppapi.Call(d.ch, aclListRequest(sw, in, out), &acl.ACLInterfaceSetACLListReply{}); err != nil {
		return fmt.Errorf("set the ACL lists of %s interface (%d) to input %v, output %v: %w", target, sw, in, out, err)
	}
	d.aclsSent[target] = aclSent{sw: sw, input: in, output: out}
	return nil
}

// guardKept puts the pod guard in front of the input list of a pod
// interface that VPP kept from an earlier vcoild (which may have had
// none), keeping the owners' ACLs the interface holds: they stay in force
// until the owners resync. held is the interface's lists as VPP holds
// them. The caller holds d.mu.
func (d *driver) guardKept(sw uint32, held aclSent) error {
	if d.guard.guarded(held.input) {
		return nil
	}
	in := d.guard.podInput(d.guard.withoutGuard(held.input))
	if err := vppapi.Call(d.ch, aclListRequest(sw, in, held.output), &acl.ACLInterfaceSetACLListReply{}); err != nil {
		return fmt.Errorf("put the pod guard on interface %d (input %v, output %v): %w", sw, in, held.output, err)
	}
	return nil
}

// interfaceACLs reads the ACL lists of every interface VPP holds.
func interfaceACLs(ch channel) (map[uint32]aclSent, error) {
	out := map[uint32]aclSent{}
	err := vppapi.Dump(ch, &acl.ACLInterfaceListDump{SwIfIndex: ^index(0)},
		func() *acl.ACLInterfaceListDetails { return &acl.ACLInterfaceListDetails{} },
		func(m *acl.ACLInterfaceListDetails) {
			n := min(int(m.NInput), len(m.Acls))
			out[uint32(m.SwIfIndex)] = aclSent{sw: uint32(m.SwIfIndex), input: slices.Clone(m.Acls[:n]), output: slices.Clone(m.Acls[n:])}
		})
	if err != nil {
		return nil, fmt.Errorf("list the interfaces' ACLs: %w", err)
	}
	return out, nil
}

// resetACLs forgets the lists at a new incarnation: their ACL indexes
// belong to the old one, and the owners set them again when they resync.
// The caller holds d.mu.
func (d *driver) resetACLs() {
	clear(d.acls)
	clear(d.aclsSent)
	d.guard = guardACLs{}
}
