package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vcoil/vcoil/v2/pkg/cni/cnitest"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// addResult is a result as vcoild returns it: JSON of version 1.1.0.
const addResult = `{
	"cniVersion": "1.1.0",
	"interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:05", "mtu": 1450, "sandbox": "/var/run/netns/pod"}],
	"ips": [
		{"address": "10.64.0.5/32", "interface": 0},
		{"address": "fd00:64::5/128", "interface": 0}
	],
	"routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}, {"dst": "::/0", "gw": "fe80::1"}]
}`

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c0ffee;K8S_POD_UID=0f6e-11"

func conf(cniVersion, socket string, extra string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":"k8s-pod-network","type":"vcoil","socket":%q%s}`, cniVersion, socket, extra)
}

func cmdArgs(stdin []byte) *skel.CmdArgs {
	return &skel.CmdArgs{
		ContainerID: "c0ffee",
		Netns:       "/var/run/netns/pod",
		IfName:      "eth0",
		Args:        podArgs,
		Path:        "/opt/cni/bin",
		StdinData:   stdin,
	}
}

func asCNIError(t *testing.T, err error) *types.Error {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is a %T, not a *types.Error", err, err)
	}
	return ce
}

func TestAddForwardsTheInvocation(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
	socket := cnitest.Serve(t, d)
	stdin := conf("1.1.0", socket, `,"mtu":1450`)
	var out bytes.Buffer
	if err := NewPlugin(&out).Add(cmdArgs(stdin)); err != nil {
		t.Fatalf("Add: %v", err)
	}
	calls := d.Calls()
	if len(calls) != 1 || calls[0].Verb != "Add" {
		t.Fatalf("vcoild received %v", calls)
	}
	got := calls[0].Args
	if got.GetContainerId() != "c0ffee" || got.GetNetns() != "/var/run/netns/pod" || got.GetIfname() != "eth0" || got.GetPath() != "/opt/cni/bin" {
		t.Errorf("vcoild received %v", got)
	}
	if !bytes.Equal(got.GetStdinData(), stdin) {
		t.Errorf("stdin %s, want %s", got.GetStdinData(), stdin)
	}
	wantArgs := map[string]string{"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "web-0", "K8S_POD_INFRA_CONTAINER_ID": "c0ffee", "K8S_POD_UID": "0f6e-11"}
	if !maps.Equal(got.GetArgs(), wantArgs) {
		t.Errorf("args %v, want %v", got.GetArgs(), wantArgs)
	}
}

func TestAddPrintsTheResultInTheRequestedVersion(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
	socket := cnitest.Serve(t, d)
	tests := []struct {
		name       string
		cniVersion string
		want       []string // in the output
		wantNot    []string
	}{
		{"cniVersion 1.1.0 gets the result as vcoild wrote it", "1.1.0",
			[]string{`"cniVersion": "1.1.0"`, `"mtu": 1450`, `"address": "fd00:64::5/128"`, `"gw": "169.254.1.1"`}, []string{`"version"`}},
		{"cniVersion 1.0.0 gets the same result labelled 1.0.0", "1.0.0",
			[]string{`"cniVersion": "1.0.0"`, `"address": "10.64.0.5/32"`}, []string{`"version"`, `"1.1.0"`}},
		{"cniVersion 0.4.0 gets IP versions and no interface mtu", "0.4.0",
			[]string{`"cniVersion": "0.4.0"`, `"version": "4"`, `"version": "6"`, `"address": "10.64.0.5/32"`}, []string{`"mtu"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := NewPlugin(&out).Add(cmdArgs(conf(tt.cniVersion, socket, ""))); err != nil {
				t.Fatalf("Add: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %s:\n%s", w, out.String())
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %s:\n%s", w, out.String())
				}
			}
			var v struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.CNIVersion != tt.cniVersion {
				t.Errorf("output is not a result of %s (%v):\n%s", tt.cniVersion, err, out.String())
			}
		})
	}
}

func TestAddRefusesAnInvocationWithoutThePod(t *testing.T) {
	tests := []struct {
		name string
		args string
		want string
	}{
		{"a missing namespace is refused", "K8S_POD_NAME=web-0", "K8S_POD_NAMESPACE is missing"},
		{"a missing pod name is refused", "K8S_POD_NAMESPACE=default", "K8S_POD_NAME is missing"},
		{"malformed CNI_ARGS are refused", "K8S_POD_NAMESPACE=default;broken", "has no '='"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(addResult)})
			a := cmdArgs(conf("1.1.0", cnitest.Serve(t, d), ""))
			a.Args = tt.args
			ce := asCNIError(t, NewPlugin(&bytes.Buffer{}).Add(a))
			if ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Msg, tt.want) {
				t.Errorf("got %+v, want code 4 saying %q", *ce, tt.want)
			}
			if n := len(d.Calls()); n != 0 {
				t.Errorf("vcoild was called %d times", n)
			}
		})
	}
}

func TestAVerbRefusesEnvironmentThatIsNotUTF8(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{})
	a := cmdArgs(conf("1.1.0", cnitest.Serve(t, d), ""))
	a.Netns = "/var/run/netns/\xff"
	ce := asCNIError(t, NewPlugin(&bytes.Buffer{}).Check(a))
	if ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Msg, "CNI_NETNS") {
		t.Errorf("got %+v, want code 4 naming CNI_NETNS", *ce)
	}
}

func TestAddRefusesAnInvalidResultFromVcoild(t *testing.T) {
	tests := []struct {
		name   string
		result string
	}{
		{"an empty result is refused", ``},
		{"a result without cniVersion is refused", `{"ips":[]}`},
		{"a result of version 0.4.0 is refused", `{"cniVersion":"0.4.0"}`},
		{"a null IP entry is refused", `{"cniVersion":"1.1.0","ips":[null]}`},
		{"a null interface entry is refused", `{"cniVersion":"1.1.0","interfaces":[null]}`},
		{"a null route is refused", `{"cniVersion":"1.1.0","routes":[null]}`},
		{"an IP without an address is refused", `{"cniVersion":"1.1.0","ips":[{"gateway":"10.0.0.1"}]}`},
		{"a route without a destination is refused", `{"cniVersion":"1.1.0","routes":[{"gw":"10.0.0.1"}]}`},
		{"an IP on a missing interface is refused", `{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.1/32","interface":3}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := cnitest.NewDaemon(cnitest.Answers{AddResult: []byte(tt.result)})
			ce := asCNIError(t, NewPlugin(&bytes.Buffer{}).Add(cmdArgs(conf("0.4.0", cnitest.Serve(t, d), ""))))
			if ce.Code != uint(cnirpc.ErrorCode_INTERNAL) || ce.Msg != "vcoild returned an invalid result" {
				t.Errorf("got %+v", *ce)
			}
		})
	}
}

func TestVcoildErrorsBecomeCNIErrors(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{
		AddErr:    cnicontract.NewError(cnirpc.ErrorCode_POOL_EXHAUSTED, "pool default is exhausted", "no free address and no block left"),
		CheckErr:  cnicontract.NewError(cnirpc.ErrorCode_INTERNAL, "eth0 has no address 10.64.0.5", ""),
		StatusErr: cnicontract.NewError(cnirpc.ErrorCode_LIMITED_CONNECTIVITY, "VPP is down", "reconnecting"),
		GCErr:     status.Error(codes.Internal, "checkpoint unreadable"),
		DelErr:    cnicontract.NewError(cnirpc.ErrorCode_IO_FAILURE, "checkpoint write failed", "disk full"),
	})
	socket := cnitest.Serve(t, d)
	p := NewPlugin(&bytes.Buffer{})
	tests := []struct {
		name string
		verb func(*skel.CmdArgs) error
		want types.Error
	}{
		{"ADD passes vcoild's code, message and details", p.Add, types.Error{Code: 101, Msg: "pool default is exhausted", Details: "no free address and no block left"}},
		{"DEL passes vcoild's error other than an unknown container", p.Del, types.Error{Code: 5, Msg: "checkpoint write failed", Details: "disk full"}},
		{"CHECK passes vcoild's error", p.Check, types.Error{Code: 100, Msg: "eth0 has no address 10.64.0.5"}},
		{"STATUS passes vcoild's error", p.Status, types.Error{Code: 51, Msg: "VPP is down", Details: "reconnecting"}},
		{"GC turns a gRPC error without detail into INTERNAL", p.GC, types.Error{Code: 100, Msg: "checkpoint unreadable"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce := asCNIError(t, tt.verb(cmdArgs(conf("1.1.0", socket, `,"cni.dev/valid-attachments":[]`))))
			if tt.want.Details == "" {
				ce.Details = "" // the gRPC code and text, checked elsewhere
			}
			if *ce != tt.want {
				t.Errorf("got %+v, want %+v", *ce, tt.want)
			}
		})
	}
}

func TestAnUnreachableVcoildIsTryAgainLaterExceptForStatus(t *testing.T) {
	sockets := []struct {
		name   string
		socket func(testing.TB) string
	}{
		{"missing socket", cnitest.MissingSocket},
		{"dead daemon", cnitest.DeadSocket},
	}
	verbs := []struct {
		name string
		call func(*Plugin, *skel.CmdArgs) error
		want uint
	}{
		{"ADD", (*Plugin).Add, 11},
		{"DEL", (*Plugin).Del, 11},
		{"CHECK", (*Plugin).Check, 11},
		{"GC", (*Plugin).GC, 11},
		{"STATUS", (*Plugin).Status, 50},
	}
	for _, s := range sockets {
		for _, v := range verbs {
			t.Run(fmt.Sprintf("%s with a %s gives code %d", v.name, s.name, v.want), func(t *testing.T) {
				start := time.Now()
				err := v.call(NewPlugin(&bytes.Buffer{}), cmdArgs(conf("1.1.0", s.socket(t), `,"cni.dev/valid-attachments":[]`)))
				ce := asCNIError(t, err)
				if ce.Code != v.want || !strings.Contains(ce.Details, "vcoild.sock") {
					t.Errorf("got %+v, want code %d naming the socket", *ce, v.want)
				}
				if elapsed := time.Since(start); elapsed > 10*time.Second {
					t.Errorf("took %s; an absent daemon must fail at once", elapsed)
				}
			})
		}
	}
}

func TestASlowVcoildIsTryAgainLaterExceptForStatus(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{Hang: true})
	socket := cnitest.Serve(t, d)
	p := NewPlugin(&bytes.Buffer{})
	p.timeouts = timeouts{add: 100 * time.Millisecond, del: 100 * time.Millisecond, check: 100 * time.Millisecond, status: 100 * time.Millisecond, gc: 100 * time.Millisecond}
	tests := []struct {
		name string
		verb func(*skel.CmdArgs) error
		want uint
	}{
		{"ADD that times out gives code 11", p.Add, 11},
		{"DEL that times out gives code 11", p.Del, 11},
		{"STATUS that times out gives code 50", p.Status, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce := asCNIError(t, tt.verb(cmdArgs(conf("1.1.0", socket, ""))))
			if ce.Code != tt.want || ce.Msg != "vcoild did not answer in time" {
				t.Errorf("got %+v, want code %d", *ce, tt.want)
			}
		})
	}
}

func TestDelSucceedsWhenVcoildDoesNotKnowTheContainer(t *testing.T) {
	tests := []struct {
		name   string
		answer error
	}{
		{"vcoild answers success", nil},
		{"vcoild answers UNKNOWN_CONTAINER", cnicontract.NewError(cnirpc.ErrorCode_UNKNOWN_CONTAINER, "container c0ffee is unknown", "")},
		{"vcoild answers NotFound", status.Error(codes.NotFound, "container c0ffee is unknown")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := cnitest.NewDaemon(cnitest.Answers{DelErr: tt.answer})
			if err := NewPlugin(&bytes.Buffer{}).Del(cmdArgs(conf("1.1.0", cnitest.Serve(t, d), ""))); err != nil {
				t.Errorf("Del: %v", err)
			}
		})
	}
}

func TestDelForwardsEvenWhenCNIArgsAreMalformed(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{})
	a := cmdArgs(conf("1.1.0", cnitest.Serve(t, d), ""))
	a.Args = "K8S_POD_NAME=a;K8S_POD_NAME=b"
	a.Netns = "" // the runtime may have removed it already
	if err := NewPlugin(&bytes.Buffer{}).Del(a); err != nil {
		t.Fatalf("Del: %v", err)
	}
	calls := d.Calls()
	if len(calls) != 1 || calls[0].Args.GetContainerId() != "c0ffee" || len(calls[0].Args.GetArgs()) != 0 {
		t.Errorf("vcoild received %v", calls)
	}
}

func TestGCForwardsTheValidAttachments(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{})
	stdin := conf("1.1.0", cnitest.Serve(t, d), `,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"},{"containerID":"b","ifname":"net1"}]`)
	if err := NewPlugin(&bytes.Buffer{}).GC(&skel.CmdArgs{Path: "/opt/cni/bin", StdinData: stdin}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	calls := d.Calls()
	if len(calls) != 1 || calls[0].Verb != "GC" {
		t.Fatalf("vcoild received %v", calls)
	}
	var got []string
	for _, a := range calls[0].GC.GetValidAttachments() {
		got = append(got, a.GetContainerId()+"/"+a.GetIfname())
	}
	if strings.Join(got, " ") != "a/eth0 b/net1" {
		t.Errorf("valid attachments %v", got)
	}
	if !bytes.Equal(calls[0].GC.GetStdinData(), stdin) {
		t.Errorf("stdin %s", calls[0].GC.GetStdinData())
	}
}

func TestGCWithoutAListOfValidAttachmentsIsRefused(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{})
	ce := asCNIError(t, NewPlugin(&bytes.Buffer{}).GC(&skel.CmdArgs{StdinData: conf("1.1.0", cnitest.Serve(t, d), "")}))
	if ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Msg, "cni.dev/valid-attachments") {
		t.Errorf("got %+v", *ce)
	}
	if n := len(d.Calls()); n != 0 {
		t.Errorf("vcoild was called %d times; it would have released every pod", n)
	}
}

func TestStatusSucceedsWhenVcoildIsReady(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{Status: &cnirpc.StatusResponse{NodeName: "node-1", Dataplane: "linux"}})
	if err := NewPlugin(&bytes.Buffer{}).Status(&skel.CmdArgs{StdinData: conf("1.1.0", cnitest.Serve(t, d), "")}); err != nil {
		t.Errorf("Status: %v", err)
	}
}

func TestAVerbRefusesAnInvalidConfigurationBeforeCallingVcoild(t *testing.T) {
	d := cnitest.NewDaemon(cnitest.Answers{})
	socket := cnitest.Serve(t, d)
	p := NewPlugin(&bytes.Buffer{})
	for name, verb := range map[string]func(*skel.CmdArgs) error{"ADD": p.Add, "DEL": p.Del, "CHECK": p.Check, "STATUS": p.Status, "GC": p.GC} {
		ce := asCNIError(t, verb(cmdArgs(conf("1.1.0", socket, `,"mtu":10`))))
		if ce.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: got %+v", name, *ce)
		}
	}
	if n := len(d.Calls()); n != 0 {
		t.Errorf("vcoild was called %d times", n)
	}
}

// FuzzPrintResult feeds arbitrary bytes as vcoild's result: the binary
// must print a result of the requested version or refuse, never panic.
func FuzzPrintResult(f *testing.F) {
	f.Add([]byte(addResult), "")
	f.Add([]byte(addResult), "0.2.0")
	for _, seed := range []string{addResult, `{"cniVersion":"1.1.0","ips":[null]}`, `{"cniVersion":"1.0.0","dns":{"nameservers":["10.0.0.10"]}}`, `null`, ``} {
		for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
			f.Add([]byte(seed), v)
		}
	}
	f.Fuzz(func(t *testing.T, result []byte, cniVersion string) {
		var out bytes.Buffer
		err := (&Plugin{stdout: &out}).printResult(result, cniVersion)
		if err != nil {
			return
		}
		var v struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.CNIVersion != cniVersion {
			t.Fatalf("printed %q for cniVersion %q (%v)", out.String(), cniVersion, err)
		}
	})
}
