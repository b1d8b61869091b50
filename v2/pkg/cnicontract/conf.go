package cnicontract

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// DefaultSocket is the path of vcoild's gRPC socket when the configuration
// names none.
const DefaultSocket = constants.DaemonSocket

// MTU bounds. 68 is the smallest MTU an IPv4 host must accept (RFC 791);
// vcoild may refuse more (IPv6 needs 1280) once it knows the pod's families.
const (
	MinMTU = 68
	MaxMTU = 65535
)

// maxSocketPath is the longest path a UNIX socket address can hold on Linux
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Keys of the GC list. libcni writes both: the spec's name and, for plugins
// written against an earlier draft of the spec, cni.dev/attachments.
const (
	// KeyValidAttachments is the spec's name of the GC list.
	KeyValidAttachments  = "cni.dev/valid-attachments"
	keyLegacyAttachments = "cni.dev/attachments"
)

// PluginInfo is what the binary answers to VERSION: the CNI spec versions
// whose configurations and results it handles. ParseConf accepts the same
// versions, so that vcoild and the binary never disagree about them.
func PluginInfo() version.PluginInfo {
	return version.PluginSupports("0.4.0", "1.0.0", "1.1.0")
}

// Conf is vcoil's network configuration as a plugin receives it: the vcoil
// entry of the conflist after the runtime has derived the request
// configuration from it (spec section 3: cniVersion and name injected,
// runtimeConfig built from the capabilities, prevResult on CHECK and DEL,
// cni.dev/valid-attachments on GC). vcoild parses CNIArgs.stdin_data with
// the same ParseConf.
//
// Fields vcoil does not know are ignored, as the spec lets a plugin do, so
// that a newer conflist or runtime never breaks an older binary.
type Conf struct {
	// PluginConf holds the spec's fields: cniVersion, name, type,
	// capabilities, ipam (rejected: vcoil allocates addresses itself), dns
	// (unused: kubelet writes the pod's resolv.conf), prevResult (parsed into
	// PrevResult; RawPrevResult is nil after ParseConf) and
	// cni.dev/valid-attachments. After ParseConf, ValidAttachments is nil
	// when the runtime gave no list and non-nil, possibly empty, when it gave
	// one, so that GC can tell "nothing is valid" from "nobody said".
	types.PluginConf

	// Socket is the absolute path of vcoild's gRPC UNIX socket.
	// Default DefaultSocket.
	Socket string `json:"socket,omitempty"`

	// MTU is the MTU of the pod interface; 0 (the default) lets vcoild
	// choose it from the node's uplink and its dataplane's overhead.
	MTU int `json:"mtu,omitempty"`

	// RuntimeConfig is the runtimeConfig object libcni builds from the
	// capabilities the conflist declares for vcoil and the arguments the
	// runtime passes for them: portMappings when vcoil serves hostPorts
	// itself (the VPP dataplane), read by PortMappings. The raw values are
	// kept for vcoild, which receives the whole configuration anyway.
	RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig,omitempty"`
}

// ParseConf parses and checks one vcoil plugin configuration and fills in
// the defaults. It never panics. Its errors are *types.Error whose message
// names the field:
//   - code 6 (decoding failure): not a JSON object, a field of the wrong
//     JSON type, a prevResult that is not a result of cniVersion;
//   - code 1 (incompatible CNI version): cniVersion missing or not one of
//     PluginInfo's versions;
//   - code 2 (unsupported field): ipam;
//   - code 7 (invalid network config): name, type, socket, mtu.
func ParseConf(data []byte) (*Conf, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		details := "null"
		if err != nil {
			details = err.Error()
		}
		return nil, types.NewError(types.ErrDecodingFailure, "network configuration: not a JSON object", details)
	}
	conf := &Conf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, decodeError(err)
	}

	supported := PluginInfo().SupportedVersions()
	if !slices.Contains(supported, conf.CNIVersion) {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("cniVersion %q: not supported", conf.CNIVersion),
			"vcoil supports cniVersion "+strings.Join(supported, ", "))
	}
	if conf.Name == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "name: missing", "")
	}
	if err := utils.ValidateNetworkName(conf.Name); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("name %q: invalid", conf.Name),
			"a network name starts with a letter or digit followed by letters, digits, '_', '.' or '-'")
	}
	if conf.Type == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "type: missing", "the type of vcoil's entry in the conflist names the binary, normally \"vcoil\"")
	}
	if conf.IPAM.Type != "" {
		return nil, types.NewError(types.ErrUnsupportedField,
			fmt.Sprintf("ipam: unsupported (type %q)", conf.IPAM.Type),
			"vcoil allocates addresses itself; remove the ipam section from vcoil's entry")
	}

	if conf.Socket == "" {
		conf.Socket = DefaultSocket
	}
	if err := checkSocket(conf.Socket); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("socket %q: %v", conf.Socket, err), "")
	}
	if conf.MTU != 0 && (conf.MTU < MinMTU || conf.MTU > MaxMTU) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("mtu %d: out of range", conf.MTU),
			fmt.Sprintf("mtu is 0 (vcoild chooses) or between %d and %d", MinMTU, MaxMTU))
	}

	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "prevResult: not a result of cniVersion "+conf.CNIVersion, err.Error())
	}
	if err := CheckResult(conf.PrevResult); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "prevResult: "+err.Error(), "")
	}

	// A list that is present but null or empty means "no attachment is
	// valid any more"; only an absent list means the runtime said nothing.
	if conf.ValidAttachments == nil {
		var legacy struct {
			Attachments []types.GCAttachment `json:"cni.dev/attachments"`
		}
		if err := json.Unmarshal(data, &legacy); err != nil {
			return nil, decodeError(err)
		}
		conf.ValidAttachments = legacy.Attachments
	}
	if conf.ValidAttachments == nil {
		_, given := raw[KeyValidAttachments]
		_, legacyGiven := raw[keyLegacyAttachments]
		if given || legacyGiven {
			conf.ValidAttachments = []types.GCAttachment{}
		}
	}
	return conf, nil
}

// MarshalJSON writes the configuration back in the form ParseConf reads.
// It exists because the embedded PluginConf's own MarshalJSON would
// otherwise be promoted and silently drop vcoil's fields.
func (c Conf) MarshalJSON() ([]byte, error) {
	pc := c.PluginConf
	if pc.RawPrevResult == nil && pc.PrevResult != nil {
		b, err := json.Marshal(pc.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("marshal prevResult: %w", err)
		}
		if err := json.Unmarshal(b, &pc.RawPrevResult); err != nil {
			return nil, fmt.Errorf("marshal prevResult: %w", err)
		}
	}
	b, err := pc.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if c.ValidAttachments != nil {
		m[KeyValidAttachments] = c.ValidAttachments
	}
	if c.Socket != "" {
		m["socket"] = c.Socket
	}
	if c.MTU != 0 {
		m["mtu"] = c.MTU
	}
	if c.RuntimeConfig != nil {
		m["runtimeConfig"] = c.RuntimeConfig
	}
	return json.Marshal(m)
}

func checkSocket(path string) error {
	switch {
	case !filepath.IsAbs(path):
		return errors.New("not an absolute path")
	case strings.ContainsRune(path, 0):
		return errors.New("contains a NUL byte")
	case len(path) > maxSocketPath:
		return fmt.Errorf("longer than the %d bytes a UNIX socket path can have", maxSocketPath)
	}
	return nil
}

// decodeError turns a JSON error into a CNI decoding failure that names the
// field in the words of the configuration, not of the Go types.
func decodeError(err error) *types.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := strings.TrimPrefix(te.Field, "PluginConf.")
		if field == "" {
			field = "network configuration"
		}
		return types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("%s: want %s, got %s", field, jsonKind(te.Type), te.Value), err.Error())
	}
	return types.NewError(types.ErrDecodingFailure, "network configuration: not valid JSON", err.Error())
}

// jsonKind says which JSON value decodes into t.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another JSON type"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON type"
}
