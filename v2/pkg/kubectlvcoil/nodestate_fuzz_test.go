package kubectlvcoil

import (
	"bytes"
	"encoding/json"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// FuzzNodeState feeds what kubectl-vcoil does with a vcoild's answer any
// bytes: the decoder, then every report and table built from the node's
// state (node, pod, blocks, trace). None may panic, whatever a vcoild of
// another build or a broken port-forward sends; -o json prints the State
// as served (it decodes and encodes to the same bytes); and the reports
// take from the state only what belongs to the pod or block asked about.
func FuzzNodeState(f *testing.F) {
	fixture, err := json.Marshal(fixtureState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fixture)
	v := `{"apiVersion":"` + nodestate.APIVersion + `","node":"node1",`
	for _, s := range []string{
		// Other versions, truncated and empty answers.
		`{"apiVersion":"nodestate.vcoil.io/v9","node":"node1"}`, `{"node":"node1"}`,
		``, `{`, `null`, v + `"pods":[{"namespace":`,
		// Wrong types, numbers out of range, odd numbers the tables print.
		v + `"blocks":[{"name":"default-0","inUse":"3"}]}`, v + `"blocks":[{"name":"default-0","inUse":1e400}]}`,
		v + `"blocks":[{"name":"default-0","pool":"default","prefixes":[],"inUse":-5,"free":9223372036854775807}]}`,
		v + `"services":{"sync":{"duration":1e308,"errors":-1},"frontends":[{"affinity":-1e308,"port":0}]}}`,
		v + `"services":{"sync":{"duration":-1e-300,"last":"0001-01-01T00:00:00Z","attempted":"9999-12-31T23:59:59Z"}}}`,
		v + `"vpp":{"incarnation":18446744073709551615,"resync":{"duration":9.3e9},"interfaces":[{"index":4294967295,"inputACLs":[]}]}}`,
		v + `"policies":{"pods":[{"namespace":"shop","name":"web-1","ingress":[{"srcPorts":{"first":9,"last":1},"protocol":"icmp"}]}]}}`,
		// Addresses that do not parse, and ones that print oddly.
		v + `"nodeSubnet":["10.64.0.0/33"]}`, v + `"natLoopback":["fe80::1%eth0","::ffff:10.64.0.5"]}`,
		v + `"pods":[{"namespace":"shop","name":"web-1","ips":["::ffff:10.64.0.5"],"interface":null}]}`,
		v + `"services":{"frontends":[{"address":"","backends":[{"address":""}],"fromNode":{}}]}}`,
		v + `"vpp":{"natMappings":[{"external":"[fe80::1%eth0]:80","locals":[{"address":"0.0.0.0:0"}]}]}}`,
		v + `"egress":{"pods":[{"namespace":"shop","name":"web-1","egresses":[{"router":"","routers":[],"destinations":["::/0"]}]}]}}`,
		// Names with spaces, slashes, tabs and newlines (table columns and
		// lines), a long container ID, and bytes that are not UTF-8.
		v + `"pods":[{"namespace":"shop","name":"web-1\tx\ny","containerID":"` + strings.Repeat("f", 80) + `","ifName":"eth 0/1"}]}`,
		v + "\"errors\":[\"a\\tb\\nc\",\"\xff\"],\"nftables\":[{\"family\":\"inet\",\"name\":\"t\",\"text\":\"\\t\\n\\n\"}]}",
		v + `"pods":[{"namespace":"","name":"","ips":["10.64.0.5"]}],"egress":{},"services":{},"policies":{},"vpp":{}}`,
	} {
		f.Add([]byte(s))
	}
	loc := trace.Locator{
		Pods: []trace.PodLocation{
			{Namespace: "shop", Name: "web-1", Node: "node1", IPs: []netip.Addr{addr("10.64.0.5"), addr("fd00:10:64::5")}},
			{Namespace: "shop", Name: "client", Node: "node1", IPs: []netip.Addr{addr("10.64.0.66")}},
		},
		Nodes: []trace.NodeLocation{{Name: "node1", Addrs: []netip.Addr{addr("198.18.0.1")}}},
	}
	flows := []trace.Flow{
		{Src: trace.Endpoint{Namespace: "shop", Name: "client"}, Dst: trace.Endpoint{Addr: addr("10.96.0.10"), Service: "shop/web"}, Port: 80, Protocol: "tcp"},
		{Src: trace.Endpoint{Addr: addr("203.0.113.9")}, Dst: trace.Endpoint{Namespace: "shop", Name: "web-1"}, Port: 8080, Protocol: "udp"},
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := nodestate.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		served, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("a decoded State does not encode: %v", err)
		}

		// kubectl vcoil node: the table, and -o json as served.
		table := render(t, OutputTable, nil, func(w io.Writer) { NodeTable(w, st, now) })
		if !strings.HasPrefix(table, "Node:") {
			t.Fatalf("node table does not start with the node: %q", table)
		}
		out, err := nodestate.Decode(strings.NewReader(render(t, OutputJSON, st, nil)))
		if err != nil {
			t.Fatalf("-o json of a State does not decode: %v", err)
		}
		if again, err := json.Marshal(out); err != nil || !bytes.Equal(again, served) {
			t.Fatalf("-o json is not the served State (%v):\n%s\n%s", err, again, served)
		}
		render(t, OutputYAML, st, nil)

		// kubectl vcoil pod: only the pod's own interface and rules.
		pod := fixturePod()
		r := PodReportOf(pod, st)
		if r.Namespace != pod.Namespace || r.Name != pod.Name || r.Node != pod.Spec.NodeName ||
			(r.Policies == nil) != (st.Policies == nil) || !slices.Equal(r.Errors, st.Errors) {
			t.Fatalf("pod report %+v does not describe pod %s/%s with the state's parts", r, pod.Namespace, pod.Name)
		}
		if r.ContainerID != "" && !slices.ContainsFunc(st.Pods, func(p nodestate.Pod) bool { return p.ContainerID == r.ContainerID }) {
			t.Fatalf("pod report names container %q, which the state does not hold", r.ContainerID)
		}
		if r.Policies != nil && r.Policies.Known != slices.ContainsFunc(st.Policies.Pods, func(p nodestate.PodRules) bool {
			return p.Namespace == pod.Namespace && p.Name == pod.Name
		}) {
			t.Fatalf("pod report's policies known = %v, against the state's pods %+v", r.Policies.Known, st.Policies.Pods)
		}
		render(t, OutputTable, nil, func(w io.Writer) { PodTable(w, r) })
		render(t, OutputJSON, r, nil)

		// kubectl vcoil blocks: the use of node1's blocks only.
		blocks := fixtureBlocks()
		b := BlocksOf(blocks, map[string]*nodestate.State{"node1": st}, nil)
		if len(b.Blocks) != len(blocks) {
			t.Fatalf("blocks report has %d blocks, want %d", len(b.Blocks), len(blocks))
		}
		for _, rb := range b.Blocks {
			named := slices.ContainsFunc(st.Blocks, func(sb nodestate.Block) bool { return sb.Name == rb.Name })
			if (rb.InUse != nil) != (rb.Node == "node1" && named) {
				t.Fatalf("block %s of %s: use %v, with the state's blocks %+v", rb.Name, rb.Node, rb.InUse, st.Blocks)
			}
		}
		render(t, OutputTable, nil, func(w io.Writer) { BlocksTable(w, b) })

		// kubectl vcoil trace over the node's state.
		for _, fl := range flows {
			res, err := trace.Trace(fl, map[string]*nodestate.State{"node1": st}, loc)
			if err != nil {
				continue
			}
			if !slices.Contains([]string{trace.Allowed, trace.Denied, trace.Rejected, trace.Dropped, trace.PartlyAllowed, trace.Unknown}, res.Verdict) {
				t.Fatalf("trace verdict %q", res.Verdict)
			}
			render(t, OutputTable, nil, func(w io.Writer) { TraceTable(w, res) })
		}
	})
}
