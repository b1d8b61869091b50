package cnicontract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// portMappingsKey is the capability (and runtimeConfig key) of hostPorts,
// as the CNI conventions name it; the portmap plugin reads the same.
const portMappingsKey = "portMappings"

// rawPortMapping is one entry of runtimeConfig.portMappings as runtimes
// write it. Numbers are decoded as float64 so that 8080.5 or 1e9 are named
// as bad ports instead of failing the whole document.
type rawPortMapping struct {
	HostPort      *float64 `json:"hostPort"`
	ContainerPort *float64 `json:"containerPort"`
	Protocol      *string  `json:"protocol"`
	HostIP        *string  `json:"hostIP"`
}

// PortMappings returns the hostPorts the runtime put in
// runtimeConfig.portMappings (none when the conflist gives vcoil no
// portMappings capability). It is separate from ParseConf so that only ADD
// (and CHECK) refuse bad mappings: a DEL must still succeed with them.
//
// Each entry needs hostPort and containerPort in 1..65535 and a protocol
// tcp, udp or sctp (any case; written lower case). hostIP is optional; an
// unspecified one (0.0.0.0, ::) means every address of the node of that
// family and comes back as such, with the family kept. Two entries for one
// host address, port and protocol are refused. Errors are *types.Error with
// code 6 (decoding failure) for JSON of the wrong shape and 7 (invalid
// network config) for a bad value, naming the entry and field:
// "runtimeConfig.portMappings[1].protocol \"icmp\": want tcp, udp or sctp".
func (c *Conf) PortMappings() ([]dataplane.PortMapping, error) {
	data, ok := c.RuntimeConfig[portMappingsKey]
	if !ok || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "runtimeConfig.portMappings: want an array of objects", err.Error())
	}
	out := make([]dataplane.PortMapping, 0, len(raw))
	type hostKey struct {
		ip    netip.Addr
		port  uint16
		proto string
	}
	seen := map[hostKey]int{}
	for i, entry := range raw {
		field := fmt.Sprintf("runtimeConfig.portMappings[%d]", i)
		var r rawPortMapping
		if err := json.Unmarshal(entry, &r); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure, field+": want an object of hostPort, containerPort, protocol and hostIP", err.Error())
		}
		var m dataplane.PortMapping
		for _, p := range []struct {
			name string
			in   *float64
			out  *uint16
		}{{"hostPort", r.HostPort, &m.HostPort}, {"containerPort", r.ContainerPort, &m.ContainerPort}} {
			switch {
			case p.in == nil:
				return nil, invalidMapping(field+"."+p.name+": missing", "")
			case *p.in < 1 || *p.in > 65535 || *p.in != math.Trunc(*p.in):
				return nil, invalidMapping(fmt.Sprintf("%s.%s %v: want a port, 1..65535", field, p.name, *p.in), "")
			}
			*p.out = uint16(*p.in)
		}
		if r.Protocol == nil || *r.Protocol == "" {
			return nil, invalidMapping(field+".protocol: missing", "want tcp, udp or sctp")
		}
		m.Protocol = strings.ToLower(*r.Protocol)
		if m.Protocol != dataplane.ProtocolTCP && m.Protocol != dataplane.ProtocolUDP && m.Protocol != dataplane.ProtocolSCTP {
			return nil, invalidMapping(fmt.Sprintf("%s.protocol %q: want tcp, udp or sctp", field, *r.Protocol), "")
		}
		if r.HostIP != nil && *r.HostIP != "" {
			a, err := netip.ParseAddr(*r.HostIP)
			if err != nil || a.Zone() != "" {
				return nil, invalidMapping(fmt.Sprintf("%s.hostIP %q: not an IP address", field, *r.HostIP), "")
			}
			m.HostIP = a.Unmap()
			if m.HostIP.IsMulticast() || m.HostIP == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
				return nil, invalidMapping(fmt.Sprintf("%s.hostIP %s: not a unicast address", field, m.HostIP), "")
			}
		}
		k := hostKey{m.HostIP, m.HostPort, m.Protocol}
		if j, dup := seen[k]; dup {
			return nil, invalidMapping(fmt.Sprintf("%s: host port %d/%s on %s is also runtimeConfig.portMappings[%d]'s", field, m.HostPort, m.Protocol, hostIPString(m.HostIP), j), "")
		}
		seen[k] = i
		out = append(out, m)
	}
	return out, nil
}

func invalidMapping(msg, details string) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, msg, details)
}

func hostIPString(a netip.Addr) string {
	if !a.IsValid() {
		return "every address"
	}
	return a.String()
}
