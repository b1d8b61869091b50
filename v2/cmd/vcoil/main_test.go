package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/pkg/cni/cnitest"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// These tests build the vcoil binary and run it through libcni, as
// containerd and CRI-O do, against a stand-in for vcoild. The network
// namespace paths are made up: the binary never enters them.

// addResult is a result as vcoild returns it: JSON of version 1.1.0.
const addResult = `{
	"cniVersion": "1.1.0",
	"interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:05", "mtu": 1450, "sandbox": "/var/run/netns/cni-vcoil-test"}],
	"ips": [{"address": "10.64.0.5/32", "interface": 0}, {"address": "fd00:64::5/128", "interface": 0}],
	"routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}, {"dst": "::/0", "gw": "fe80::1"}]
}`

// recordingExec runs plugins the way libcni does by default and keeps what
// each successful run printed, so that tests can read the exact output.
type recordingExec struct {
	invoke.RawExec
	version.PluginDecoder

	mu      sync.Mutex
	outputs [][]byte
}

func (e *recordingExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	out, err := e.RawExec.ExecPlugin(ctx, pluginPath, stdin, environ)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.outputs = append(e.outputs, out)
	return out, err
}

func (e *recordingExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *recordingExec) lastOutput() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.outputs) == 0 {
		return nil
	}
	return e.outputs[len(e.outputs)-1]
}

// runtime is what a container runtime holds: the plugin path, libcni's
// cache and one network configuration list.
type runtime struct {
	binDir string
	exec   *recordingExec
	cni    *libcni.CNIConfig
	list   *libcni.NetworkConfigList
}

// newRuntime loads a conflist with vcoil as its only plugin. libcni's
// default cache, /var/lib/cni, needs root; the cache goes to a temporary
// directory instead.
func newRuntime(t *testing.T, binDir, cniVersion, socket, extra string) *runtime {
	t.Helper()
	conflist := fmt.Sprintf(`{
		"cniVersion": %q,
		"name": "k8s-pod-network",
		"plugins": [{"type": "vcoil", "socket": %q%s}]
	}`, cniVersion, socket, extra)
	list, err := libcni.ConfListFromBytes([]byte(conflist))
	if err != nil {
		t.Fatalf("load the conflist: %v\n%s", err, conflist)
	}
	e := &recordingExec{}
	return &runtime{
		binDir: binDir,
		exec:   e,
		cni:    libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), e),
		list:   list,
	}
}

func pod(containerID string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: containerID,
		NetNS:       "/var/run/netns/cni-vcoil-test",
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "web-0"},
			{"K8S_POD_INFRA_CONTAINER_ID", containerID},
			{"K8S_POD_UID", "0f6e5b3c-1111-4222-8333-944455556666"},
		},
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func asCNIError(t *testing.T, err error) *types.Error {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is a %T, not a CNI error", err, err)
	}
	return ce
}

// forwarded checks one invocation vcoild received against what the
// runtime passed, and returns the configuration parsed as vcoild will.
func forwarded(t *testing.T, r *runtime, call cnitest.Call, verb string, rt *libcni.RuntimeConf) *cnicontract.Conf {
	t.Helper()
	if call.Verb != verb {
		t.Fatalf("vcoild received %s, want %s", call.Verb, verb)
	}
	a := call.Args
	if a.GetContainerId() != rt.ContainerID || a.GetNetns() != rt.NetNS || a.GetIfname() != rt.IfName || a.GetPath() != r.binDir {
		t.Errorf("%s: vcoild received container %q netns %q ifname %q path %q", verb, a.GetContainerId(), a.GetNetns(), a.GetIfname(), a.GetPath())
	}
	wantArgs := map[string]string{}
	for _, kv := range rt.Args {
		wantArgs[kv[0]] = kv[1]
	}
	if !maps.Equal(a.GetArgs(), wantArgs) {
		t.Errorf("%s: vcoild received CNI_ARGS %v, want %v", verb, a.GetArgs(), wantArgs)
	}
	conf, err := cnicontract.ParseConf(a.GetStdinData())
	if err != nil {
		t.Fatalf("%s: vcoild cannot parse the stdin it received: %v\n%s", verb, err, a.GetStdinData())
	}
	if conf.Name != r.list.Name || conf.CNIVersion != r.list.CNIVersion || conf.Type != "vcoil" {
		t.Errorf("%s: stdin says name %q cniVersion %q type %q", verb, conf.Name, conf.CNIVersion, conf.Type)
	}
	return conf
}

func TestVcoilThroughLibcni(t *testing.T) {
	binDir := gobuild.Dir(t, "github.com/vcoil/vcoil/v2/cmd/vcoil")

	t.Run("VERSION lists 0.4.0, 1.0.0 and 1.1.0", func(t *testing.T) {
		r := newRuntime(t, binDir, "1.1.0", cnitest.MissingSocket(t), "")
		info, err := r.cni.GetVersionInfo(ctx(t), "vcoil")
		if err != nil {
			t.Fatalf("VERSION: %v", err)
		}
		if got := info.SupportedVersions(); !slices.Equal(got, []string{"0.4.0", "1.0.0", "1.1.0"}) {
			t.Errorf("VERSION lists %v", got)
		}
	})

	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run("ADD, CHECK and DEL forward the invocation and ADD prints the result in cniVersion "+v, func(t *testing.T) {
			d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
			r := newRuntime(t, binDir, v, cnitest.Serve(t, d), `, "mtu": 1450`)
			rt := pod("c0ffee-" + strings.ReplaceAll(v, ".", ""))

			res, err := r.cni.AddNetworkList(ctx(t), r.list, rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			var printed struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(r.exec.lastOutput(), &printed); err != nil || printed.CNIVersion != v {
				t.Errorf("the binary printed %s for cniVersion %s", r.exec.lastOutput(), v)
			}
			switch v {
			case "0.4.0":
				r040, ok := res.(*types040.Result)
				if !ok || len(r040.IPs) != 2 || r040.IPs[0].Version != "4" || r040.IPs[1].Version != "6" || r040.IPs[0].Address.String() != "10.64.0.5/32" {
					t.Errorf("ADD result %+v", res)
				}
			default:
				r100, ok := res.(*types100.Result)
				if !ok || r100.CNIVersion != v || len(r100.IPs) != 2 || r100.Interfaces[0].Mtu != 1450 || r100.IPs[1].Address.String() != "fd00:64::5/128" {
					t.Errorf("ADD result %+v", res)
				}
			}
			calls := d.Calls()
			if len(calls) != 1 {
				t.Fatalf("vcoild received %d calls", len(calls))
			}
			conf := forwarded(t, r, calls[0], "Add", rt)
			if conf.Socket == "" || conf.MTU != 1450 || conf.PrevResult != nil {
				t.Errorf("ADD: stdin gives socket %q mtu %d prevResult %v", conf.Socket, conf.MTU, conf.PrevResult)
			}

			if err := r.cni.CheckNetworkList(ctx(t), r.list, rt); err != nil {
				t.Fatalf("CHECK: %v", err)
			}
			if err := r.cni.DelNetworkList(ctx(t), r.list, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			calls = d.Calls()
			if len(calls) != 3 {
				t.Fatalf("vcoild received %d calls", len(calls))
			}
			for i, verb := range []string{"Check", "Del"} {
				conf := forwarded(t, r, calls[i+1], verb, rt)
				if conf.PrevResult == nil {
					t.Errorf("%s: stdin has no prevResult", verb)
				} else if pr, err := types100.GetResult(conf.PrevResult); err != nil || len(pr.IPs) != 2 || pr.IPs[0].Address.String() != "10.64.0.5/32" {
					t.Errorf("%s: prevResult %+v (%v)", verb, conf.PrevResult, err)
				}
			}
		})
	}

	t.Run("a capability the runtime fills reaches vcoild in runtimeConfig", func(t *testing.T) {
		d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
		r := newRuntime(t, binDir, "1.1.0", cnitest.Serve(t, d), `, "capabilities": {"io.kubernetes.cri.pod-annotations": true}`)
		rt := pod("c0ffee-caps")
		rt.CapabilityArgs = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"vcoil.io/pool": "blue"}}
		if _, err := r.cni.AddNetworkList(ctx(t), r.list, rt); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		conf := forwarded(t, r, d.Calls()[0], "Add", rt)
		if got := string(conf.RuntimeConfig["io.kubernetes.cri.pod-annotations"]); got != `{"vcoil.io/pool":"blue"}` {
			t.Errorf("runtimeConfig %v", conf.RuntimeConfig)
		}
	})

	t.Run("vcoild's error comes out with its code, msg and details", func(t *testing.T) {
		d := cnitest.NewDaemon(cnitest.Answers{
			AddErr:    cnicontract.NewError(cnirpc.ErrorCode_POOL_EXHAUSTED, "pool default is exhausted", "no free address in the node's blocks and no free block in the pool"),
			StatusErr: cnicontract.NewError(cnirpc.ErrorCode_LIMITED_CONNECTIVITY, "the dataplane is down", "VPP does not answer on /run/vpp/api.sock"),
		})
		r := newRuntime(t, binDir, "1.1.0", cnitest.Serve(t, d), "")
		_, err := r.cni.AddNetworkList(ctx(t), r.list, pod("c0ffee-err"))
		want := types.Error{Code: 101, Msg: "pool default is exhausted", Details: "no free address in the node's blocks and no free block in the pool"}
		if ce := asCNIError(t, err); *ce != want {
			t.Errorf("ADD error %+v, want %+v", *ce, want)
		}
		want = types.Error{Code: 51, Msg: "the dataplane is down", Details: "VPP does not answer on /run/vpp/api.sock"}
		if ce := asCNIError(t, r.cni.GetStatusNetworkList(ctx(t), r.list)); *ce != want {
			t.Errorf("STATUS error %+v, want %+v", *ce, want)
		}
	})

	for _, s := range []struct {
		name   string
		socket func(testing.TB) string
	}{
		{"a missing socket", cnitest.MissingSocket},
		{"a dead daemon", cnitest.DeadSocket},
	} {
		t.Run(s.name+" gives code 11 on ADD and DEL and code 50 on STATUS", func(t *testing.T) {
			r := newRuntime(t, binDir, "1.1.0", s.socket(t), "")
			_, err := r.cni.AddNetworkList(ctx(t), r.list, pod("c0ffee-gone"))
			if ce := asCNIError(t, err); ce.Code != types.ErrTryAgainLater {
				t.Errorf("ADD error %+v, want code 11", *ce)
			}
			if ce := asCNIError(t, r.cni.DelNetworkList(ctx(t), r.list, pod("c0ffee-gone"))); ce.Code != types.ErrTryAgainLater {
				t.Errorf("DEL error %+v, want code 11", *ce)
			}
			if ce := asCNIError(t, r.cni.GetStatusNetworkList(ctx(t), r.list)); ce.Code != 50 {
				t.Errorf("STATUS error %+v, want code 50", *ce)
			}
		})
	}

	t.Run("STATUS succeeds when vcoild is ready", func(t *testing.T) {
		d := cnitest.NewDaemon(cnitest.Answers{Status: &cnirpc.StatusResponse{NodeName: "node-1", Dataplane: "linux"}})
		r := newRuntime(t, binDir, "1.1.0", cnitest.Serve(t, d), "")
		if err := r.cni.GetStatusNetworkList(ctx(t), r.list); err != nil {
			t.Fatalf("STATUS: %v", err)
		}
		if calls := d.Calls(); len(calls) != 1 || calls[0].Verb != "Status" {
			t.Errorf("vcoild received %v", calls)
		}
	})

	for _, answer := range []struct {
		name string
		err  error
	}{
		{"success", nil},
		{"UNKNOWN_CONTAINER", cnicontract.NewError(cnirpc.ErrorCode_UNKNOWN_CONTAINER, "container c0ffee-unknown is unknown", "")},
		{"NotFound", status.Error(codes.NotFound, "container c0ffee-unknown is unknown")},
	} {
		t.Run("DEL of an unknown container succeeds when vcoild answers "+answer.name, func(t *testing.T) {
			d := cnitest.NewDaemon(cnitest.Answers{DelErr: answer.err})
			r := newRuntime(t, binDir, "1.1.0", cnitest.Serve(t, d), "")
			rt := pod("c0ffee-unknown")
			rt.NetNS = "" // gone already, as when a node restarts
			if err := r.cni.DelNetworkList(ctx(t), r.list, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if calls := d.Calls(); len(calls) != 1 || calls[0].Verb != "Del" || calls[0].Args.GetContainerId() != "c0ffee-unknown" {
				t.Errorf("vcoild received %v", calls)
			}
		})
	}

	t.Run("GC deletes stale cached attachments and passes the valid ones to vcoild", func(t *testing.T) {
		d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
		r := newRuntime(t, binDir, "1.1.0", cnitest.Serve(t, d), "")
		for _, id := range []string{"c0ffee-live", "c0ffee-stale"} {
			if _, err := r.cni.AddNetworkList(ctx(t), r.list, pod(id)); err != nil {
				t.Fatalf("ADD %s: %v", id, err)
			}
		}
		valid := []types.GCAttachment{{ContainerID: "c0ffee-live", IfName: "eth0"}, {ContainerID: "c0ffee-elsewhere", IfName: "net1"}}
		if err := r.cni.GCNetworkList(ctx(t), r.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			t.Fatalf("GC: %v", err)
		}
		calls := d.Calls()
		var verbs []string
		for _, c := range calls {
			verbs = append(verbs, c.Verb+" "+c.Args.GetContainerId())
		}
		if want := []string{"Add c0ffee-live", "Add c0ffee-stale", "Del c0ffee-stale", "GC "}; !slices.Equal(verbs, want) {
			t.Fatalf("vcoild received %q, want %q", verbs, want)
		}
		gc := calls[3].GC
		var got []types.GCAttachment
		for _, a := range gc.GetValidAttachments() {
			got = append(got, types.GCAttachment{ContainerID: a.GetContainerId(), IfName: a.GetIfname()})
		}
		if !slices.Equal(got, valid) {
			t.Errorf("GC valid attachments %v, want %v", got, valid)
		}
		conf, err := cnicontract.ParseConf(gc.GetStdinData())
		if err != nil || conf.Name != "k8s-pod-network" || !slices.Equal(conf.ValidAttachments, valid) {
			t.Errorf("GC stdin %s parses to %+v (%v)", gc.GetStdinData(), conf, err)
		}
	})

	t.Run("an error is printed on stdout as the spec's error object with a non-zero exit", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binDir, "vcoil"))
		cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=c0ffee-direct", "CNI_NETNS=/var/run/netns/cni-vcoil-test",
			"CNI_IFNAME=eth0", "CNI_PATH="+binDir, "CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0")
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"vcoil","socket":%q}`, cnitest.MissingSocket(t)))
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		err := cmd.Run()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() == 0 {
			t.Fatalf("the binary exited with %v", err)
		}
		var got map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
		}
		if got["code"] != float64(11) || got["msg"] != "vcoild is unreachable" || !strings.Contains(fmt.Sprint(got["details"]), "vcoild.sock") {
			t.Errorf("stdout %s", stdout.String())
		}
	})

	t.Run("without CNI_COMMAND the binary says what it is", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binDir, "vcoil"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the binary exited with %v", err)
		}
		if !strings.Contains(stderr.String(), "vcoil") || !strings.Contains(stderr.String(), "0.4.0, 1.0.0, 1.1.0") {
			t.Errorf("stderr %q", stderr.String())
		}
	})
}
