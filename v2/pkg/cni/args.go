package cni

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/types"
)

// Keys of CNI_ARGS that kubelet (through the runtime) passes for every pod.
const (
	ArgPodNamespace        = "K8S_POD_NAMESPACE"
	ArgPodName             = "K8S_POD_NAME"
	ArgPodInfraContainerID = "K8S_POD_INFRA_CONTAINER_ID"
	ArgPodUID              = "K8S_POD_UID"
	// ArgIgnoreUnknown asks plugins that reject unknown keys not to. vcoil
	// rejects no key, so it is passed on like any other.
	ArgIgnoreUnknown = "IgnoreUnknown"
)

// ParseArgs splits CNI_ARGS ("K1=V1;K2=V2", spec section 2) into the map
// that CNIArgs.args carries. Every key is kept: vcoil forwards what it does
// not know to vcoild instead of failing, so IgnoreUnknown changes nothing.
//
// It is more lenient than the spec's "alphanumeric pairs" where that costs
// nothing: empty segments (a trailing ';') are skipped and a value may hold
// '=' (the pair splits at the first one). It refuses what would lose or
// garble information: a segment without '=', an empty key, a key with
// spaces or control characters, a key given twice, and text that is not
// UTF-8 (protobuf strings must be). Its error is a *types.Error with code 4
// (invalid environment variables) naming CNI_ARGS. It never panics.
func ParseArgs(s string) (map[string]string, error) {
	args := map[string]string{}
	if !utf8.ValidString(s) {
		return nil, argsError("not valid UTF-8", fmt.Sprintf("%q", s))
	}
	for pair := range strings.SplitSeq(s, ";") {
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, argsError(fmt.Sprintf("pair %q has no '='", pair), "")
		}
		if key == "" {
			return nil, argsError(fmt.Sprintf("pair %q has an empty key", pair), "")
		}
		if i := strings.IndexFunc(key, badKeyRune); i >= 0 {
			return nil, argsError(fmt.Sprintf("key %q contains a space or control character", key), "")
		}
		if _, dup := args[key]; dup {
			return nil, argsError(fmt.Sprintf("key %q is given twice", key), "")
		}
		args[key] = value
	}
	return args, nil
}

func badKeyRune(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r) || !unicode.IsPrint(r)
}

func argsError(msg, details string) *types.Error {
	return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS: "+msg, details)
}
