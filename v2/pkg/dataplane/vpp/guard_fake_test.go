package vpp

import (
	"fmt"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/interface_types"
)

// fakeACLs is the fake VPP's model of the ACL plugin's ACLs as VPP 25.10
// keeps them: by index, reused after a deletion, each with its tag and
// rules; an ACL an interface uses cannot be deleted.
type fakeACLs struct {
	byIndex map[uint32]*acl.ACLDetails
	// countersOn is acl_stats_intf_counters_enable's setting.
	countersOn bool
}

// fakeFirstACL is the first index the fake gives an ACL.
const fakeFirstACL = 100

func newFakeACLs() *fakeACLs { return &fakeACLs{byIndex: map[uint32]*acl.ACLDetails{}} }

// inUse reports whether an interface's list holds index.
func (f *fakeVPP) aclInUse(index uint32) bool {
	for _, l := range f.aclLists {
		if slices.Contains(l[1:], index) {
			return true
		}
	}
	return false
}

func (f *fakeVPP) handleACL(msg api.Message) (api.Message, int32, bool) {
	a := f.aclPlugin
	switch m := msg.(type) {
	case *acl.ACLAddReplace:
		if int(m.Count) != len(m.R) {
			return &acl.ACLAddReplaceReply{}, int32(api.INVALID_VALUE), true
		}
		index := m.ACLIndex
		if index == ^uint32(0) {
			// VPP starts at 0; the fake at fakeFirstACL, so that the
			// small indexes tests give the owners' ACLs stay apart.
			index = fakeFirstACL
			for a.byIndex[index] != nil {
				index++
			}
		} else if a.byIndex[index] == nil {
			return &acl.ACLAddReplaceReply{ACLIndex: ^uint32(0)}, int32(api.INVALID_VALUE), true
		}
		a.byIndex[index] = &acl.ACLDetails{ACLIndex: index, Tag: m.Tag, Count: m.Count, R: slices.Clone(m.R)}
		return &acl.ACLAddReplaceReply{ACLIndex: index}, 0, true
	case *acl.ACLDel:
		if a.byIndex[m.ACLIndex] == nil {
			return &acl.ACLDelReply{}, int32(api.NO_SUCH_ENTRY), true
		}
		if f.aclInUse(m.ACLIndex) {
			return &acl.ACLDelReply{}, int32(api.ACL_IN_USE_INBOUND), true
		}
		delete(a.byIndex, m.ACLIndex)
		return &acl.ACLDelReply{}, 0, true
	case *acl.ACLStatsIntfCountersEnable:
		a.countersOn = m.Enable
		// VPP 25.10 answers with acl_del_reply's ID (guard.go).
		return &acl.ACLDelReply{}, 0, true
	}
	return nil, 0, false
}

func (f *fakeVPP) handleACLDump(msg api.Message) ([]api.Message, bool) {
	var out []api.Message
	switch m := msg.(type) {
	case *acl.ACLDump:
		var idx []uint32
		for i := range f.aclPlugin.byIndex {
			if m.ACLIndex == ^uint32(0) || m.ACLIndex == i {
				idx = append(idx, i)
			}
		}
		slices.Sort(idx)
		for _, i := range idx {
			d := *f.aclPlugin.byIndex[i]
			d.R = slices.Clone(d.R)
			out = append(out, &d)
		}
	case *acl.ACLInterfaceListDump:
		var sws []uint32
		for sw := range f.aclLists {
			if m.SwIfIndex == ^interface_types.InterfaceIndex(0) || uint32(m.SwIfIndex) == sw {
				sws = append(sws, sw)
			}
		}
		slices.Sort(sws)
		for _, sw := range sws {
			l := f.aclLists[sw]
			out = append(out, &acl.ACLInterfaceListDetails{SwIfIndex: index(sw), Count: uint8(len(l) - 1), NInput: uint8(l[0]), Acls: slices.Clone(l[1:])})
		}
	default:
		return nil, false
	}
	return out, true
}

// guardMsgString renders the guard's requests for exact comparisons.
func guardMsgString(msg api.Message) (string, bool) {
	switch m := msg.(type) {
	case *acl.ACLDump:
		return "acl_dump", true
	case *acl.ACLInterfaceListDump:
		return "acl_interface_list_dump", true
	case *acl.ACLAddReplace:
		return fmt.Sprintf("acl_add_replace %d %q %d rules", int32(m.ACLIndex), m.Tag, m.Count), true
	case *acl.ACLDel:
		return fmt.Sprintf("acl_del %d", m.ACLIndex), true
	case *acl.ACLStatsIntfCountersEnable:
		return fmt.Sprintf("acl_stats_intf_counters_enable %t", m.Enable), true
	}
	return "", false
}

// guardOnly is the ACL list a new pod interface sw gets when no owner has
// ACLs for it: the guard and its permit, made by a fresh VPP's first sync.
func guardOnly(sw uint32) string {
	return fmt.Sprintf("acl_interface_set_acl_list %d count=2 n_input=2 acls=[100 101]", sw)
}
