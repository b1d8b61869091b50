package nodestate

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzState is a State with every part filled, as a VPP node's vcoild
// serves it.
func fuzzState() *State {
	at := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	pfx, addr := netip.MustParsePrefix, netip.MustParseAddr
	return &State{
		APIVersion: APIVersion, Node: "node1", Dataplane: "vpp", Version: "v2.3.0", Collected: at,
		NodeSubnet:  []netip.Prefix{pfx("10.64.0.0/27"), pfx("fd00:10:64::/123")},
		NATLoopback: []netip.Addr{addr("10.64.0.30"), addr("fd00:10:64::1f")},
		Blocks:      []Block{{Name: "default-0", Pool: "default", Prefixes: []netip.Prefix{pfx("10.64.0.0/27")}, NodeSubnet: true, InUse: 3, Free: 27}},
		Pods: []Pod{{Namespace: "shop", Name: "web-1", ContainerID: "4f1c0e9a", IfName: "eth0", IPs: []netip.Addr{addr("10.64.0.5")},
			Interface: &Interface{Kind: "tap", Name: "tap3", Index: 3}, Created: at.Add(-time.Hour)}},
		Services: &Services{Renderer: "nat44", Sync: Sync{Last: at, Duration: 0.012, Attempted: at, Error: "busy", Errors: 2},
			Frontends: []Frontend{{Service: "shop/web", Kind: FrontendLoadBalancer, Address: addr("203.0.113.1"), Port: 80, Protocol: "TCP", Local: true,
				Affinity: 10800, SourceRanges: []netip.Prefix{pfx("198.51.100.0/24")}, Backends: []Backend{{Address: addr("10.64.0.5"), Port: 8080, Local: true}},
				FromNode: &NodeTraffic{NoBackends: "reject"}}},
			Rejected: []Rejected{{Service: "shop/odd", Reason: "port 0 is not a port"}}},
		Policies: &Policies{Renderer: "vpp-acl", AlwaysAllowed: []netip.Addr{addr("198.18.0.1")},
			Pods: []PodRules{{Namespace: "shop", Name: "web-1", IPs: []netip.Addr{addr("10.64.0.5")},
				Ingress: []Rule{{Action: "permit", Protocol: "tcp", Src: pfx("10.64.0.66/32"), DstPorts: &PortRange{First: 8080, Last: 8080}}, {Action: "deny", Protocol: "any"}}}}},
		Egress: &Egress{Pods: []EgressPod{{Namespace: "shop", Name: "web-1", Egresses: []EgressUse{{Egress: "shop/nat", Encapsulation: "fou",
			Router: addr("10.96.0.50"), Destinations: []netip.Prefix{pfx("0.0.0.0/0")}}}}}},
		VPP: &VPP{Connected: true, Version: "25.10", Incarnation: 2, Interfaces: []VPPInterface{{Index: 3, Name: "tap3", Tag: "vcoil@2 4f1c0e9a eth0", Up: true,
			InputACLs: []uint32{1}}}, ACLs: []VPPACL{{Index: 1, Tag: "vcoil-pol@2", Rules: []string{"permit tcp"}}},
			NATMappings: []VPPNATMapping{{External: netip.MustParseAddrPort("203.0.113.1:80"), Protocol: "tcp",
				Locals: []VPPNATLocal{{Address: netip.MustParseAddrPort("10.64.0.5:8080"), Probability: 100}}}}},
		NFTables: []NFTable{{Family: "inet", Name: "vcoil-svc", Text: "table inet vcoil-svc {\n}\n"}},
		Errors:   []string{"vpp: slow"},
	}
}

// FuzzDecode feeds Decode, what kubectl-vcoil reads vcoild's answer with,
// any bytes. It must never panic; it accepts only its own APIVersion and
// names the other one; and what it accepts is a fixed point of encoding:
// encoded (as vcoild serves a State) and decoded again it encodes to the
// same bytes, so that -o json shows what vcoild served.
func FuzzDecode(f *testing.F) {
	full, err := json.Marshal(fuzzState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	v := `{"apiVersion":"` + APIVersion + `",`
	for _, s := range []string{
		// Other versions, none, and a version of the wrong type.
		`{"apiVersion":"nodestate.vcoil.io/v2","node":"node1"}`,
		`{"apiVersion":"nodestate.vcoil.io/v9","node":"node1"}`,
		`{"node":"node1"}`, `{"apiVersion":1}`, `{"apiVersion":null}`,
		v + `"node":"node1","blocks":[{"name":"default-0","pool":"default","prefixes":["10.1.0.0/28"],"inUse":2,"free":14}]}`,
		// Truncated, empty, not an object, and trailing bytes.
		``, `{`, `null`, `[]`, `"x"`, v + `"node":"node1","blocks":[{"name":`,
		v + `"node":"n"} trailing`, v + `"node":"n"}{"apiVersion":"x"}`,
		// Wrong types and numbers out of range.
		v + `"blocks":[{"inUse":"3"}]}`, v + `"blocks":[{"inUse":1e400}]}`,
		v + `"blocks":[{"free":99999999999999999999}]}`,
		v + `"pods":[{"interface":{"index":4294967296}}]}`, v + `"pods":[{"interface":{"index":-1}}]}`,
		v + `"vpp":{"incarnation":18446744073709551615,"natMappings":[{"locals":[{"probability":256}]}]}}`,
		v + `"services":{"sync":{"duration":1e308,"errors":-1},"frontends":[{"port":65536,"affinity":-0}]}}`,
		v + `"services":{"sync":{"duration":"12ms"}}}`,
		v + `"policies":{"pods":[{"ingress":[{"srcPorts":{"first":9,"last":1}}]}]}}`,
		// Addresses and networks that do not parse, and odd ones that do.
		v + `"nodeSubnet":["10.64.0.0/33"]}`, v + `"nodeSubnet":["10.64.0.1/24","::ffff:10.0.0.0/104"]}`,
		v + `"natLoopback":["10.64.0.300"]}`, v + `"natLoopback":["fe80::1%eth0"]}`,
		v + `"vpp":{"natMappings":[{"external":"203.0.113.1"}]}}`,
		v + `"vpp":{"natMappings":[{"external":"[fe80::1%eth0]:80"}]}}`,
		v + `"policies":{"pods":[{"ingress":[{"src":"","dst":"::/0"}]}]}}`,
		// Times that do not parse, and ones with an offset.
		v + `"collected":"yesterday"}`, v + `"collected":"2026-11-26T03:00:00.5+05:30"}`,
		v + `"pods":[{"created":"0001-01-01T00:00:00Z"}]}`,
		// Names with spaces, slashes, tabs, newlines, NULs and bytes that
		// are not UTF-8; empty lists.
		v + `"node":"node 1/../x","pods":[{"namespace":"a b","name":"c/d\te\nf","containerID":"\u0000"}]}`,
		v + "\"node\":\"\xff\xfe\",\"errors\":[\"\"]}",
		v + `"blocks":[],"pods":[],"nftables":[{"text":""}],"egress":{},"services":{},"policies":{},"vpp":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(bytes.NewReader(data))
		if err != nil {
			if st != nil {
				t.Fatalf("Decode returned a State with error %v", err)
			}
			// A State of another version is refused naming both.
			var other State
			if json.NewDecoder(bytes.NewReader(data)).Decode(&other) == nil {
				if !strings.Contains(err.Error(), strconv.Quote(other.APIVersion)) || !strings.Contains(err.Error(), strconv.Quote(APIVersion)) {
					t.Fatalf("refusal %q does not name the apiVersion %q", err, other.APIVersion)
				}
			}
			return
		}
		if st == nil || st.APIVersion != APIVersion {
			t.Fatalf("accepted %+v", st)
		}
		once, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a decoded State does not encode: %v", err)
		}
		back, err := Decode(bytes.NewReader(once))
		if err != nil {
			t.Fatalf("an encoded State does not decode: %v\n%s", err, once)
		}
		twice, err := json.Marshal(back)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("State changed through encoding (%v):\n%s\n%s", err, once, twice)
		}
		if back.Node != st.Node || len(back.Pods) != len(st.Pods) || !back.Collected.Equal(st.Collected) {
			t.Fatalf("State changed through encoding: node %q, %d pods, collected %v; want %q, %d, %v",
				back.Node, len(back.Pods), back.Collected, st.Node, len(st.Pods), st.Collected)
		}
	})
}
