package cnicontract

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

func confWithRuntime(t *testing.T, runtime string) *Conf {
	t.Helper()
	in := `{"cniVersion":"1.1.0","name":"net","type":"vcoil","capabilities":{"portMappings":true}`
	if runtime != "" {
		in += `,"runtimeConfig":` + runtime
	}
	c, err := ParseConf([]byte(in + "}"))
	if err != nil {
		t.Fatalf("ParseConf: %v", err)
	}
	return c
}

func TestPortMappings(t *testing.T) {
	tests := []struct {
		name    string
		runtime string
		want    []dataplane.PortMapping
	}{
		{name: "no runtimeConfig means no hostPorts", runtime: ""},
		{name: "a runtimeConfig without portMappings means none", runtime: `{"bandwidth":{}}`},
		{name: "a null list means none", runtime: `{"portMappings":null}`},
		{name: "an empty list means none", runtime: `{"portMappings":[]}`, want: []dataplane.PortMapping{}},
		{
			name: "mappings as containerd writes them are read in order, protocols lower-cased",
			runtime: `{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":""},
				{"hostPort":5353,"containerPort":53,"protocol":"UDP"},
				{"hostPort":9000,"containerPort":9000,"protocol":"sctp","hostIP":"198.18.0.11"}]}`,
			want: []dataplane.PortMapping{
				{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
				{HostPort: 5353, ContainerPort: 53, Protocol: "udp"},
				{HostPort: 9000, ContainerPort: 9000, Protocol: "sctp", HostIP: netip.MustParseAddr("198.18.0.11")},
			},
		},
		{
			name: "unspecified host addresses keep their family, an IPv4-mapped one is IPv4",
			runtime: `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"0.0.0.0"},
				{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"::"},
				{"hostPort":81,"containerPort":80,"protocol":"tcp","hostIP":"::ffff:198.18.0.11"}]}`,
			want: []dataplane.PortMapping{
				{HostPort: 80, ContainerPort: 80, Protocol: "tcp", HostIP: netip.MustParseAddr("0.0.0.0")},
				{HostPort: 80, ContainerPort: 80, Protocol: "tcp", HostIP: netip.MustParseAddr("::")},
				{HostPort: 81, ContainerPort: 80, Protocol: "tcp", HostIP: netip.MustParseAddr("198.18.0.11")},
			},
		},
		{
			name:    "the same host port for two protocols is two mappings",
			runtime: `{"portMappings":[{"hostPort":53,"containerPort":53,"protocol":"tcp"},{"hostPort":53,"containerPort":53,"protocol":"udp"}]}`,
			want: []dataplane.PortMapping{
				{HostPort: 53, ContainerPort: 53, Protocol: "tcp"},
				{HostPort: 53, ContainerPort: 53, Protocol: "udp"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := confWithRuntime(t, tt.runtime).PortMappings()
			if err != nil {
				t.Fatalf("PortMappings: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestPortMappingsErrors(t *testing.T) {
	tests := []struct {
		name     string
		runtime  string
		code     uint
		wantText string
	}{
		{"a list that is an object", `{"portMappings":{"hostPort":80}}`, types.ErrDecodingFailure,
			"runtimeConfig.portMappings: want an array of objects"},
		{"an entry that is a string", `{"portMappings":["80:80"]}`, types.ErrDecodingFailure,
			"runtimeConfig.portMappings[0]: want an object of hostPort, containerPort, protocol and hostIP"},
		{"a port written as a string", `{"portMappings":[{"hostPort":"80","containerPort":80,"protocol":"tcp"}]}`, types.ErrDecodingFailure,
			"runtimeConfig.portMappings[0]: want an object of hostPort, containerPort, protocol and hostIP"},
		{"a missing host port", `{"portMappings":[{"containerPort":80,"protocol":"tcp"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].hostPort: missing"},
		{"host port 0", `{"portMappings":[{"hostPort":0,"containerPort":80,"protocol":"tcp"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].hostPort 0: want a port, 1..65535"},
		{"a container port beyond 65535", `{"portMappings":[{"hostPort":80,"containerPort":65536,"protocol":"tcp"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].containerPort 65536: want a port, 1..65535"},
		{"a fractional port in the second entry", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp"},{"hostPort":80.5,"containerPort":80,"protocol":"udp"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[1].hostPort 80.5: want a port, 1..65535"},
		{"a negative port", `{"portMappings":[{"hostPort":80,"containerPort":-1,"protocol":"tcp"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].containerPort -1: want a port, 1..65535"},
		{"a missing protocol", `{"portMappings":[{"hostPort":80,"containerPort":80}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].protocol: missing"},
		{"an unknown protocol", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"icmp"}]}`, types.ErrInvalidNetworkConfig,
			`runtimeConfig.portMappings[0].protocol "icmp": want tcp, udp or sctp`},
		{"a host IP that is a name", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"node-1"}]}`, types.ErrInvalidNetworkConfig,
			`runtimeConfig.portMappings[0].hostIP "node-1": not an IP address`},
		{"a host IP with a zone", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"fe80::1%eth0"}]}`, types.ErrInvalidNetworkConfig,
			`runtimeConfig.portMappings[0].hostIP "fe80::1%eth0": not an IP address`},
		{"a multicast host IP", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp","hostIP":"224.0.0.1"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[0].hostIP 224.0.0.1: not a unicast address"},
		{"one host port twice", `{"portMappings":[{"hostPort":80,"containerPort":80,"protocol":"tcp"},{"hostPort":80,"containerPort":8080,"protocol":"TCP"}]}`, types.ErrInvalidNetworkConfig,
			"runtimeConfig.portMappings[1]: host port 80/tcp on every address is also runtimeConfig.portMappings[0]'s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := confWithRuntime(t, tt.runtime).PortMappings()
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("error %v (%T): want a *types.Error", err, err)
			}
			if te.Code != tt.code || te.Msg != tt.wantText {
				t.Errorf("code %d msg %q\nwant code %d msg %q", te.Code, te.Msg, tt.code, tt.wantText)
			}
		})
	}
}

// FuzzPortMappings: whatever the runtime writes, PortMappings never panics,
// and what it accepts are ports and protocols a dataplane can take.
func FuzzPortMappings(f *testing.F) {
	f.Add(`[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"198.18.0.1"}]`)
	f.Add(`[{"hostPort":1e9,"containerPort":-0,"protocol":"UdP"}]`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, list string) {
		c := &Conf{RuntimeConfig: map[string]json.RawMessage{"portMappings": json.RawMessage(list)}}
		ms, err := c.PortMappings()
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.HostPort == 0 || m.ContainerPort == 0 || (m.Protocol != "tcp" && m.Protocol != "udp" && m.Protocol != "sctp") ||
				(m.HostIP.IsValid() && m.HostIP.Is4In6()) {
				t.Errorf("accepted %+v from %s", m, list)
			}
		}
	})
}
