package kubectlvcoil

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// -update rewrites testdata/*.golden from what the code prints; the diff
// is then reviewed like code (docs/kubectl-vcoil.md shows these outputs).
var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func render(t *testing.T, format string, v any, tbl func(w io.Writer)) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, format, v, tbl); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestPoolsTableAndJSON(t *testing.T) {
	pools := Pools(fixturePools(), fixtureBlocks(), fixtureServices())
	golden(t, "pools", render(t, OutputTable, nil, func(w io.Writer) { PoolsTable(w, pools) }))
	golden(t, "pools.json", render(t, OutputJSON, pools, nil))
}

func TestBlocksTableShowsDashForANodeNotRead(t *testing.T) {
	states := map[string]*nodestate.State{"node1": fixtureState()}
	errs := map[string]error{"node2": errString("node node2: no running vcoild pod (namespace kube-system, selector app.kubernetes.io/name=vcoild, 0 pod(s) found)")}
	b := BlocksOf(fixtureBlocks(), states, errs)
	golden(t, "blocks", render(t, OutputTable, nil, func(w io.Writer) { BlocksTable(w, b) }))
	golden(t, "blocks.yaml", render(t, OutputYAML, b, nil))
}

type errString string

func (e errString) Error() string { return string(e) }

func TestPodTable(t *testing.T) {
	r := PodReportOf(fixturePod(), fixtureState())
	golden(t, "pod", render(t, OutputTable, nil, func(w io.Writer) { PodTable(w, r) }))
	golden(t, "pod.json", render(t, OutputJSON, r, nil))
}

func TestNodeTable(t *testing.T) {
	golden(t, "node", render(t, OutputTable, nil, func(w io.Writer) { NodeTable(w, fixtureState(), now) }))
}

func TestNodeJSONIsTheServedState(t *testing.T) {
	st := fixtureState()
	out := render(t, OutputJSON, st, nil)
	back, err := nodestate.Decode(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if back.Node != "node1" || len(back.Pods) != 2 || back.Policies.Pods[1].Ingress[0].Src != netip.MustParsePrefix("10.64.0.66/32") {
		t.Errorf("the state did not survive -o json: %+v", back)
	}
}

func TestTraceTable(t *testing.T) {
	st := fixtureState()
	loc := trace.Locator{
		Pods: []trace.PodLocation{
			{Namespace: "shop", Name: "web-1", Node: "node1", IPs: []netip.Addr{addr("10.64.0.5"), addr("fd00:10:64::5")}},
			{Namespace: "shop", Name: "client", Node: "node1", IPs: []netip.Addr{addr("10.64.0.66")}},
			{Namespace: "shop", Name: "web-2", Node: "node2", IPs: []netip.Addr{addr("10.64.0.40")}},
		},
		Nodes: []trace.NodeLocation{{Name: "node1", Addrs: []netip.Addr{addr("198.18.0.1")}}},
	}
	r, err := trace.Trace(trace.Flow{Src: trace.Endpoint{Namespace: "shop", Name: "client"}, Dst: trace.Endpoint{Addr: addr("10.96.0.10"), Service: "shop/web"}, Port: 80, Protocol: "tcp"},
		map[string]*nodestate.State{"node1": st}, loc)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "trace-service", render(t, OutputTable, nil, func(w io.Writer) { TraceTable(w, r) }))
	var back trace.Result
	if err := json.Unmarshal([]byte(render(t, OutputJSON, r, nil)), &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict != trace.Unknown || len(back.Paths) != 2 {
		t.Errorf("-o json: verdict %s with %d paths, want unknown (node2's state is missing) with 2", back.Verdict, len(back.Paths))
	}

	r, err = trace.Trace(trace.Flow{Src: trace.Endpoint{Addr: addr("203.0.113.9")}, Dst: trace.Endpoint{Namespace: "shop", Name: "web-1"}, Port: 8080, Protocol: "tcp"},
		map[string]*nodestate.State{"node1": st}, loc)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "trace-denied", render(t, OutputTable, nil, func(w io.Writer) { TraceTable(w, r) }))
}

func TestUnknownOutputIsRefused(t *testing.T) {
	if err := CheckOutput("wide"); err == nil || !strings.Contains(err.Error(), `"wide"`) {
		t.Errorf("CheckOutput(wide) = %v", err)
	}
	for _, f := range []string{"", "json", "yaml"} {
		if err := CheckOutput(f); err != nil {
			t.Errorf("CheckOutput(%q) = %v", f, err)
		}
	}
}
