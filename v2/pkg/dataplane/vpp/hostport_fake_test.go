package vpp

import (
	"fmt"
	"net/netip"
	"sort"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/nat44_ed"
)

// fakeStaticMapping is the fake VPP's record of a plain static mapping:
// the request that added it.
type fakeStaticMapping = nat44_ed.Nat44AddDelStaticMappingV2

// staticKey is how VPP 25.10 finds a mapping: external address, port and
// protocol (nat44_ed_sm_o2i_lookup).
func staticKey(m *nat44_ed.Nat44AddDelStaticMappingV2) string {
	return fmt.Sprintf("%d %s:%d", m.Protocol, netip.AddrFrom4(m.ExternalIPAddress), m.ExternalPort)
}

// handleHostPort answers the static mapping requests; ok is false for the
// others. Retvals are VPP 25.10's: UNSUPPORTED while NAT44-ED is off,
// VALUE_EXIST for a second mapping of an external address and port,
// NO_SUCH_ENTRY for deleting one VPP lacks.
func (f *fakeVPP) handleHostPort(msg api.Message) (reply api.Message, retval int32, ok bool) {
	m, ok := msg.(*nat44_ed.Nat44AddDelStaticMappingV2)
	if !ok {
		return nil, 0, false
	}
	reply = &nat44_ed.Nat44AddDelStaticMappingV2Reply{}
	if !f.nat {
		return reply, int32(api.UNSUPPORTED), true
	}
	if m.ExternalSwIfIndex != interface_types.InterfaceIndex(^uint32(0)) {
		panic("fake VPP: interface-bound static mappings are not modelled")
	}
	k := staticKey(m)
	if m.IsAdd {
		if f.static[k] != nil {
			return reply, int32(api.VALUE_EXIST), true
		}
		c := *m
		f.static[k] = &c
		return reply, 0, true
	}
	if f.static[k] == nil {
		return reply, int32(api.NO_SUCH_ENTRY), true
	}
	delete(f.static, k)
	return reply, 0, true
}

// handleHostPortDump answers nat44_static_mapping_dump, in key order.
func (f *fakeVPP) handleHostPortDump(msg api.Message) ([]api.Message, bool) {
	if _, ok := msg.(*nat44_ed.Nat44StaticMappingDump); !ok {
		return nil, false
	}
	keys := make([]string, 0, len(f.static))
	for k := range f.static {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []api.Message{}
	for _, k := range keys {
		m := f.static[k]
		out = append(out, &nat44_ed.Nat44StaticMappingDetails{
			Flags: m.Flags, LocalIPAddress: m.LocalIPAddress, ExternalIPAddress: m.ExternalIPAddress,
			Protocol: m.Protocol, LocalPort: m.LocalPort, ExternalPort: m.ExternalPort,
			ExternalSwIfIndex: m.ExternalSwIfIndex, VrfID: m.VrfID, Tag: m.Tag,
		})
	}
	return out, true
}

// addStatic puts a mapping in the fake VPP, as another vcoild or the
// services renderer would have.
func (f *fakeVPP) addStatic(m nat44_ed.Nat44AddDelStaticMappingV2) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.IsAdd = true
	f.static[staticKey(&m)] = &m
}

// statics lists the fake VPP's static mappings as msgString writes their
// requests, in key order.
func (f *fakeVPP) statics() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, k := range sortedKeys(f.static) {
		out = append(out, hostPortMsgString(f.static[k]))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func hostPortMsgString(m *nat44_ed.Nat44AddDelStaticMappingV2) string {
	return fmt.Sprintf("nat44_add_del_static_mapping_v2 add=%t proto=%d %s:%d -> %s:%d flags=%d ext_if=%d vrf=%d tag=%q",
		m.IsAdd, m.Protocol, netip.AddrFrom4(m.ExternalIPAddress), m.ExternalPort, netip.AddrFrom4(m.LocalIPAddress), m.LocalPort,
		m.Flags, int32(m.ExternalSwIfIndex), m.VrfID, m.Tag)
}

func hostPortMsg(msg api.Message) (string, bool) {
	switch m := msg.(type) {
	case *nat44_ed.Nat44AddDelStaticMappingV2:
		return hostPortMsgString(m), true
	case *nat44_ed.Nat44StaticMappingDump:
		return "nat44_static_mapping_dump", true
	}
	return "", false
}
