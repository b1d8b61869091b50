package cniinstall

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInstallWritesBinariesAndConflistAndLeavesOthersAlone(t *testing.T) {
	src, bin, conf := t.TempDir(), t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(src, "vcoil"), []byte("vcoil v2"), 0o755))
	must(os.WriteFile(filepath.Join(src, "portmap"), []byte("portmap"), 0o755))
	must(os.WriteFile(filepath.Join(bin, "portmap"), []byte("portmap"), 0o755)) // same: untouched
	must(os.WriteFile(filepath.Join(bin, "bridge"), []byte("other plugin"), 0o755))
	must(os.WriteFile(filepath.Join(conf, "05-other.conflist"), []byte("{}"), 0o644))
	must(os.WriteFile(filepath.Join(conf, "99-loopback.conf"), []byte("{}"), 0o644))

	opts := Options{
		SourceDir: src, BinDir: bin, ConfDir: conf, ConfName: "10-vcoil.conflist",
		Conflist: Conflist{CNIVersion: "1.1.0", Name: "vcoil", Socket: "/run/vcoild.sock", MTU: 1400, PortMap: true},
	}
	res, err := Install(opts)
	must(err)
	if !slices.Equal(res.Binaries, []string{filepath.Join(bin, "vcoil")}) {
		t.Errorf("installed %v, want only vcoil (portmap was already there)", res.Binaries)
	}
	if !slices.Equal(res.Earlier, []string{"05-other.conflist"}) {
		t.Errorf("earlier configurations = %v", res.Earlier)
	}
	for name, want := range map[string]string{"vcoil": "vcoil v2", "bridge": "other plugin"} {
		got, _ := os.ReadFile(filepath.Join(bin, name))
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(bin, "vcoil")); fi.Mode().Perm() != 0o755 {
		t.Errorf("vcoil mode = %v", fi.Mode())
	}
	data, err := os.ReadFile(filepath.Join(conf, "10-vcoil.conflist"))
	must(err)
	var cl struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	must(json.Unmarshal(data, &cl))
	if cl.CNIVersion != "1.1.0" || cl.Name != "vcoil" || len(cl.Plugins) != 2 ||
		cl.Plugins[0]["type"] != "vcoil" || cl.Plugins[0]["socket"] != "/run/vcoild.sock" || cl.Plugins[0]["mtu"] != float64(1400) ||
		cl.Plugins[1]["type"] != "portmap" {
		t.Errorf("conflist = %s", data)
	}
	left, _ := filepath.Glob(filepath.Join(conf, ".*"))
	leftBin, _ := filepath.Glob(filepath.Join(bin, ".*"))
	if len(left)+len(leftBin) != 0 {
		t.Errorf("temporary files left: %v %v", left, leftBin)
	}
	// A second run changes nothing.
	res, err = Install(opts)
	must(err)
	if len(res.Binaries) != 0 {
		t.Errorf("second run installed %v", res.Binaries)
	}
}

func TestInstallWithoutTheVcoilBinaryFails(t *testing.T) {
	src := t.TempDir()
	_, err := Install(Options{SourceDir: src, BinDir: t.TempDir(), ConfDir: t.TempDir(), ConfName: "10-vcoil.conflist"})
	if err == nil {
		t.Fatal("installed without a vcoil binary")
	}
}

func TestTheDataplaneDecidesWhoServesHostPorts(t *testing.T) {
	for _, tc := range []struct {
		dataplane string
		want      string
	}{
		{"linux", `{"cniVersion":"1.1.0","name":"vcoil","plugins":[{"socket":"/run/vcoild.sock","type":"vcoil"},` +
			`{"capabilities":{"portMappings":true},"type":"portmap"}]}`},
		{"vpp", `{"cniVersion":"1.1.0","name":"vcoil","plugins":[{"capabilities":{"portMappings":true},"socket":"/run/vcoild.sock","type":"vcoil"}]}`},
	} {
		t.Run(tc.dataplane, func(t *testing.T) {
			c := Conflist{CNIVersion: "1.1.0", Name: "vcoil", Socket: "/run/vcoild.sock"}
			if err := c.ForDataplane(tc.dataplane); err != nil {
				t.Fatal(err)
			}
			data, err := c.Render()
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, data); err != nil {
				t.Fatal(err)
			}
			if compact.String() != tc.want {
				t.Errorf("conflist:\n got %s\nwant %s", compact.String(), tc.want)
			}
		})
	}
	c := Conflist{}
	if err := c.ForDataplane("dpdk"); err == nil || !strings.Contains(err.Error(), `dataplane "dpdk": want linux or vpp`) {
		t.Errorf("an unknown dataplane: %v", err)
	}
	if _, err := (Conflist{PortMap: true, HostPorts: true}).Render(); err == nil {
		t.Error("a conflist with portmap chained and vcoil serving hostPorts was rendered")
	}
}
