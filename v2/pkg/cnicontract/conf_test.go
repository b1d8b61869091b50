package cnicontract

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		name  string
		input string
		check func(t *testing.T, c *Conf)
	}{
		{
			name:  "a minimal configuration gets the default socket and leaves the mtu to vcoild",
			input: `{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"vcoil"}`,
			check: func(t *testing.T, c *Conf) {
				if c.Socket != DefaultSocket || c.MTU != 0 {
					t.Errorf("socket %q, mtu %d; want %q, 0", c.Socket, c.MTU, DefaultSocket)
				}
				if c.CNIVersion != "1.1.0" || c.Name != "k8s-pod-network" || c.Type != "vcoil" {
					t.Errorf("got %+v", c.PluginConf)
				}
				if c.ValidAttachments != nil || c.PrevResult != nil || c.RuntimeConfig != nil {
					t.Errorf("absent fields came out set: %+v", c)
				}
			},
		},
		{
			name: "the socket and the mtu are read",
			input: `{"cniVersion":"1.0.0","name":"net","type":"vcoil",
				"socket":"/var/run/vcoil/vcoild.sock","mtu":1450}`,
			check: func(t *testing.T, c *Conf) {
				if c.Socket != "/var/run/vcoil/vcoild.sock" || c.MTU != 1450 {
					t.Errorf("socket %q, mtu %d", c.Socket, c.MTU)
				}
			},
		},
		{
			name: "an entry as libcni hands it for ADD keeps capabilities and runtimeConfig",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"capabilities":{"portMappings":true},
				"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`,
			check: func(t *testing.T, c *Conf) {
				if !c.Capabilities["portMappings"] {
					t.Errorf("capabilities %v", c.Capabilities)
				}
				if !strings.Contains(string(c.RuntimeConfig["portMappings"]), `"hostPort":8080`) {
					t.Errorf("runtimeConfig %s", c.RuntimeConfig["portMappings"])
				}
			},
		},
		{
			name: "a DEL configuration of cniVersion 0.4.0 has its prevResult parsed",
			input: `{"cniVersion":"0.4.0","name":"net","type":"vcoil",
				"prevResult":{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/p"}],
				"ips":[{"version":"4","address":"10.64.0.5/32","interface":0}]}}`,
			check: func(t *testing.T, c *Conf) {
				r, ok := c.PrevResult.(*types040.Result)
				if !ok {
					t.Fatalf("prevResult is %T", c.PrevResult)
				}
				if len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.64.0.5/32" {
					t.Errorf("prevResult ips %v", r.IPs)
				}
				if c.RawPrevResult != nil {
					t.Errorf("RawPrevResult stays set after parsing")
				}
			},
		},
		{
			name: "a CHECK configuration of cniVersion 1.1.0 has its prevResult parsed",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mtu":1500}],
				"ips":[{"address":"fd00::5/128","interface":0}]}}`,
			check: func(t *testing.T, c *Conf) {
				r, ok := c.PrevResult.(*types100.Result)
				if !ok {
					t.Fatalf("prevResult is %T", c.PrevResult)
				}
				if r.Interfaces[0].Mtu != 1500 {
					t.Errorf("prevResult interfaces %v", r.Interfaces[0])
				}
			},
		},
		{
			name: "a GC list that is empty stays an empty list, not an absent one",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"cni.dev/valid-attachments":[]}`,
			check: func(t *testing.T, c *Conf) {
				if c.ValidAttachments == nil || len(c.ValidAttachments) != 0 {
					t.Errorf("valid attachments %#v", c.ValidAttachments)
				}
			},
		},
		{
			name: "a GC list that is null counts as given and empty",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"cni.dev/valid-attachments":null}`,
			check: func(t *testing.T, c *Conf) {
				if c.ValidAttachments == nil || len(c.ValidAttachments) != 0 {
					t.Errorf("valid attachments %#v", c.ValidAttachments)
				}
			},
		},
		{
			name: "a GC list under the legacy key cni.dev/attachments is used",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
			check: func(t *testing.T, c *Conf) {
				want := []types.GCAttachment{{ContainerID: "c1", IfName: "eth0"}}
				if !slices.Equal(c.ValidAttachments, want) {
					t.Errorf("valid attachments %v, want %v", c.ValidAttachments, want)
				}
			},
		},
		{
			name: "the spec's GC key wins over the legacy one",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil",
				"cni.dev/valid-attachments":[{"containerID":"c2","ifname":"eth0"}],
				"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
			check: func(t *testing.T, c *Conf) {
				want := []types.GCAttachment{{ContainerID: "c2", IfName: "eth0"}}
				if !slices.Equal(c.ValidAttachments, want) {
					t.Errorf("valid attachments %v, want %v", c.ValidAttachments, want)
				}
			},
		},
		{
			name: "unknown fields, the reserved args and an empty ipam are ignored",
			input: `{"cniVersion":"1.1.0","name":"net","type":"vcoil","futureField":{"x":1},
				"args":{"cni":{"ips":["10.0.0.1"]}},"ipam":{}}`,
			check: func(t *testing.T, c *Conf) {
				if c.Socket != DefaultSocket {
					t.Errorf("socket %q", c.Socket)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConf([]byte(tt.input))
			if err != nil {
				t.Fatalf("ParseConf: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseConfErrors(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		wantCode  uint
		wantField string // must appear in the message
	}{
		{"text that is not JSON is a decoding failure", `{"cniVersion":`, types.ErrDecodingFailure, "network configuration"},
		{"a JSON array is not a configuration", `[]`, types.ErrDecodingFailure, "network configuration"},
		{"JSON null is not a configuration", `null`, types.ErrDecodingFailure, "network configuration"},
		{"an mtu given as a string names mtu", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","mtu":"1500"}`, types.ErrDecodingFailure, "mtu"},
		{"a socket given as a number names socket", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","socket":5}`, types.ErrDecodingFailure, "socket"},
		{"a capabilities value that is not a boolean names capabilities", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","capabilities":{"portMappings":"yes"}}`, types.ErrDecodingFailure, "capabilities"},
		{"a runtimeConfig that is not an object names runtimeConfig", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","runtimeConfig":[]}`, types.ErrDecodingFailure, "runtimeConfig"},
		{"a GC list entry of the wrong type names the GC key", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","cni.dev/valid-attachments":[{"containerID":1}]}`, types.ErrDecodingFailure, "cni.dev/valid-attachments"},
		{"a legacy GC list of the wrong type names the legacy key", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","cni.dev/attachments":{}}`, types.ErrDecodingFailure, "cni.dev/attachments"},
		{"a missing cniVersion is an incompatible version", `{"name":"n","type":"vcoil"}`, types.ErrIncompatibleCNIVersion, "cniVersion"},
		{"cniVersion 0.3.1 is an incompatible version", `{"cniVersion":"0.3.1","name":"n","type":"vcoil"}`, types.ErrIncompatibleCNIVersion, "cniVersion"},
		{"a missing name is an invalid configuration", `{"cniVersion":"1.1.0","type":"vcoil"}`, types.ErrInvalidNetworkConfig, "name"},
		{"a name with a slash is an invalid configuration", `{"cniVersion":"1.1.0","name":"a/b","type":"vcoil"}`, types.ErrInvalidNetworkConfig, "name"},
		{"a missing type is an invalid configuration", `{"cniVersion":"1.1.0","name":"n"}`, types.ErrInvalidNetworkConfig, "type"},
		{"an ipam section is an unsupported field named with its value", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","ipam":{"type":"host-local"}}`, types.ErrUnsupportedField, `ipam: unsupported (type "host-local")`},
		{"a relative socket path is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","socket":"run/vcoild.sock"}`, types.ErrInvalidNetworkConfig, "socket"},
		{"a socket path with a NUL byte is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","socket":"/run/a\u0000b"}`, types.ErrInvalidNetworkConfig, "socket"},
		{"a socket path too long for a UNIX socket is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","socket":"/` + strings.Repeat("s", 120) + `"}`, types.ErrInvalidNetworkConfig, "socket"},
		{"a negative mtu is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","mtu":-1}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"an mtu below 68 is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","mtu":67}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"an mtu above 65535 is an invalid configuration", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","mtu":65536}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"a prevResult that is not a result names prevResult", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","prevResult":{"ips":[{"address":"bad"}]}}`, types.ErrDecodingFailure, "prevResult"},
		{"a prevResult with a null IP names prevResult", `{"cniVersion":"0.4.0","name":"n","type":"vcoil","prevResult":{"ips":[null]}}`, types.ErrDecodingFailure, "prevResult: ips[0] is null"},
		{"a prevResult with an IP without address names prevResult", `{"cniVersion":"0.4.0","name":"n","type":"vcoil","prevResult":{"ips":[{}]}}`, types.ErrDecodingFailure, "prevResult: ips[0].address is missing"},
		{"a prevResult with a route without dst names prevResult", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","prevResult":{"cniVersion":"1.1.0","routes":[{"gw":"10.0.0.1"}]}}`, types.ErrDecodingFailure, "prevResult: routes[0].dst is missing"},
		{"a prevResult with an IP on a missing interface names prevResult", `{"cniVersion":"1.0.0","name":"n","type":"vcoil","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/32","interface":1}]}}`, types.ErrDecodingFailure, "prevResult: ips[0].interface 1"},
		{"a prevResult that is not an object names prevResult", `{"cniVersion":"1.1.0","name":"n","type":"vcoil","prevResult":[]}`, types.ErrDecodingFailure, "prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConf([]byte(tt.input))
			if err == nil {
				t.Fatalf("ParseConf accepted it: %+v", c)
			}
			var ce *types.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is a %T, not a *types.Error", err, err)
			}
			if ce.Code != tt.wantCode || !strings.Contains(ce.Msg, tt.wantField) {
				t.Errorf("got code %d %q (details %q); want code %d naming %q", ce.Code, ce.Msg, ce.Details, tt.wantCode, tt.wantField)
			}
		})
	}
}

func TestConfMarshalKeepsVcoilFields(t *testing.T) {
	in := `{"cniVersion":"1.1.0","name":"net","type":"vcoil","socket":"/run/x.sock","mtu":9000,
		"runtimeConfig":{"a":1},"cni.dev/valid-attachments":[]}`
	c, err := ParseConf([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{c, *c} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"socket":"/run/x.sock"`, `"mtu":9000`, `"runtimeConfig":{"a":1}`, `"cni.dev/valid-attachments":[]`, `"name":"net"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%T marshals to %s, without %s", v, b, want)
			}
		}
	}
}

func FuzzParseConf(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.1.0","name":"k8s-pod-network","type":"vcoil"}`,
		`{"cniVersion":"1.0.0","name":"n","type":"vcoil","socket":"/run/v.sock","mtu":1450,"dns":{"nameservers":["10.0.0.10"]}}`,
		`{"cniVersion":"1.1.0","name":"n","type":"vcoil","capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[]}}`,
		`{"cniVersion":"0.4.0","name":"n","type":"vcoil","prevResult":{"cniVersion":"0.4.0","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","address":"10.1.0.2/32","interface":0}],"routes":[{"dst":"0.0.0.0/0"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","type":"vcoil","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"fd00::1/128","gateway":"fe80::1"}],"dns":{"search":["a"]}}}`,
		`{"cniVersion":"1.1.0","name":"n","type":"vcoil","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],"cni.dev/attachments":[]}`,
		`{"cniVersion":"1.1.0","name":"n","type":"vcoil","ipam":{"type":"host-local"}}`,
		`{"cniVersion":"1.1.0","name":"n","type":"vcoil","mtu":-3,"socket":"rel"}`,
		`{"CNIVERSION":"1.1.0","Name":"n","TYPE":"vcoil","Socket":"/a"}`,
		`{}`, `null`, `[]`, `"x"`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConf(data)
		if err != nil {
			var ce *types.Error
			if !errors.As(err, &ce) || ce.Msg == "" {
				t.Fatalf("error %v (%T) is not a *types.Error with a message", err, err)
			}
			return
		}
		if !slices.Contains(PluginInfo().SupportedVersions(), c.CNIVersion) || c.Name == "" || c.Type == "" {
			t.Fatalf("accepted %+v", c.PluginConf)
		}
		if !filepath.IsAbs(c.Socket) || (c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxMTU)) {
			t.Fatalf("accepted socket %q, mtu %d", c.Socket, c.MTU)
		}
		// What ParseConf accepted, written back, reads the same.
		once, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c, err)
		}
		c2, err := ParseConf(once)
		if err != nil {
			t.Fatalf("ParseConf refuses its own output %s: %v", once, err)
		}
		twice, err := json.Marshal(c2)
		if err != nil {
			t.Fatalf("marshal %+v: %v", c2, err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("round trip changed the configuration:\n%s\n%s", once, twice)
		}
		if (c.ValidAttachments == nil) != (c2.ValidAttachments == nil) {
			t.Fatalf("round trip changed whether a GC list was given: %v, %v", c.ValidAttachments, c2.ValidAttachments)
		}
	})
}
