package cni

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  map[string]string
	}{
		{"no CNI_ARGS is an empty map", "", map[string]string{}},
		{
			"kubelet's arguments are all kept",
			"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=0f6e",
			map[string]string{ArgIgnoreUnknown: "1", ArgPodNamespace: "default", ArgPodName: "web-0", ArgPodInfraContainerID: "abc123", ArgPodUID: "0f6e"},
		},
		{"keys vcoil does not know are passed on", "FOO=bar;K8S_POD_NAME=p", map[string]string{"FOO": "bar", ArgPodName: "p"}},
		{"empty segments and a trailing semicolon are skipped", ";A=1;;B=2;", map[string]string{"A": "1", "B": "2"}},
		{"an empty value is kept", "K8S_POD_UID=", map[string]string{ArgPodUID: ""}},
		{"a value splits at the first '=' and keeps the rest", "TOKEN=YWJj==", map[string]string{"TOKEN": "YWJj=="}},
		{"a value may contain spaces", "NOTE=a b", map[string]string{"NOTE": "a b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.input)
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.input, err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("ParseArgs(%q) = %v, want %v", tt.input, got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string // in the message
	}{
		{"a pair without '=' is refused", "K8S_POD_NAME=p;garbage", `pair "garbage" has no '='`},
		{"an empty key is refused", "=value", "empty key"},
		{"a key with a space is refused", "K8S_POD_NAME=p; K8S_POD_UID=u", `key " K8S_POD_UID"`},
		{"a key with a control character is refused", "A\tB=1", "control character"},
		{"a key given twice is refused", "K8S_POD_NAME=a;K8S_POD_NAME=b", `key "K8S_POD_NAME" is given twice`},
		{"text that is not UTF-8 is refused", "K8S_POD_NAME=\xff", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.input)
			if err == nil {
				t.Fatalf("ParseArgs(%q) accepted it: %v", tt.input, got)
			}
			var ce *types.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is a %T, not a *types.Error", err, err)
			}
			if ce.Code != types.ErrInvalidEnvironmentVariables || !strings.HasPrefix(ce.Msg, "CNI_ARGS: ") || !strings.Contains(ce.Msg, tt.want) {
				t.Errorf("got code %d %q; want code 4 naming CNI_ARGS and saying %q", ce.Code, ce.Msg, tt.want)
			}
		})
	}
}

// formatArgs writes args the way runtimes do, in a fixed order.
func formatArgs(args map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(args)) {
		pairs = append(pairs, k+"="+args[k])
	}
	return strings.Join(pairs, ";")
}

func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u",
		";;A=1;",
		"A=b=c",
		"=x",
		"novalue",
		"A=1;A=2",
		"K\x00=1",
		"K=\xff\xfe",
		"ключ=значение",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := ParseArgs(s)
		if err != nil {
			var ce *types.Error
			if !errors.As(err, &ce) || ce.Code != types.ErrInvalidEnvironmentVariables || !strings.HasPrefix(ce.Msg, "CNI_ARGS: ") {
				t.Fatalf("ParseArgs(%q) error %v is not a CNI_ARGS error with code 4", s, err)
			}
			return
		}
		for k, v := range args {
			if k == "" || strings.ContainsAny(k, "=; ") || strings.Contains(v, ";") {
				t.Fatalf("ParseArgs(%q) gave the pair %q=%q", s, k, v)
			}
		}
		// Written back in the runtime's form, the pairs read the same.
		again, err := ParseArgs(formatArgs(args))
		if err != nil {
			t.Fatalf("ParseArgs refuses %q, written from %q: %v", formatArgs(args), s, err)
		}
		if !maps.Equal(args, again) {
			t.Fatalf("round trip of %q changed %v into %v", s, args, again)
		}
	})
}
