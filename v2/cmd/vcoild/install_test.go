package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// install-cni writes the conflist of the node's dataplane: portmap chained
// on linux, the portMappings capability on vcoil on vpp; --portmap cannot
// bring portmap back on vpp.
func TestInstallCNIConflistFollowsTheDataplane(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "vcoil"), []byte("vcoil"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		conf := t.TempDir()
		cmd := installCommand()
		cmd.SetArgs(append([]string{"--source-dir", src, "--bin-dir", t.TempDir(), "--conf-dir", conf}, args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err != nil {
			return "", err
		}
		data, err := os.ReadFile(filepath.Join(conf, "10-vcoil.conflist"))
		return strings.Join(strings.Fields(string(data)), ""), err
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `"plugins":[{"socket":"/run/vcoild.sock","type":"vcoil"},{"capabilities":{"portMappings":true},"type":"portmap"}]`},
		{[]string{"--portmap=false"}, `"plugins":[{"socket":"/run/vcoild.sock","type":"vcoil"}]`},
		{[]string{"--dataplane=vpp"}, `"plugins":[{"capabilities":{"portMappings":true},"socket":"/run/vcoild.sock","type":"vcoil"}]`},
		{[]string{"--dataplane=vpp", "--portmap=false"}, `"plugins":[{"capabilities":{"portMappings":true},"socket":"/run/vcoild.sock","type":"vcoil"}]`},
	} {
		got, err := run(tc.args...)
		if err != nil || !strings.Contains(got, tc.want) {
			t.Errorf("install-cni %v: %v\n got %s\nwant %s", tc.args, err, got, tc.want)
		}
	}
	if _, err := run("--dataplane=vpp", "--portmap"); err == nil || !strings.Contains(err.Error(), "--portmap: the VPP dataplane serves hostPorts itself") {
		t.Errorf("install-cni --dataplane=vpp --portmap: %v", err)
	}
	if _, err := run("--dataplane=dpdk"); err == nil || !strings.Contains(err.Error(), `--dataplane: dataplane "dpdk": want linux or vpp`) {
		t.Errorf("install-cni --dataplane=dpdk: %v", err)
	}
}
