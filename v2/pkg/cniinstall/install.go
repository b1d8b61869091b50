// Package cniinstall puts vcoil's CNI binaries and its network configuration
// on a node (vcoild's install-cni subcommand, run as an init container). Every
// file is replaced through atomicfile (a temporary file in the same directory,
// then a rename), so a container runtime never executes half a binary or reads
// half a configuration; files of other plugins are left alone.
package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/atomicfile"
)

// Options say what to install where.
type Options struct {
	// SourceDir holds the binaries to install: vcoil, and the plugins the
	// conflist chains (portmap) when the image ships them.
	SourceDir string
	// BinDir is the node's CNI binary directory (/opt/cni/bin).
	BinDir string
	// ConfDir is the node's CNI configuration directory (/etc/cni/net.d).
	ConfDir string
	// ConfName is the conflist's file name (10-vcoil.conflist).
	ConfName string
	// Conflist is the configuration to write.
	Conflist Conflist
}

// Conflist is vcoil's network configuration list.
type Conflist struct {
	CNIVersion string
	Name       string
	// Socket of vcoild.
	Socket string
	// MTU of pod interfaces; 0 lets vcoild detect it.
	MTU int
	// PortMap chains the portmap plugin for hostPort (the Linux
	// dataplane: its iptables rules sit in the node's kernel, which pod
	// traffic passes).
	PortMap bool
	// HostPorts gives vcoil itself the portMappings capability, so that
	// the runtime hands it the hostPorts (the VPP dataplane, whose pod
	// traffic never passes the node's kernel). Not with PortMap.
	HostPorts bool
}

// ForDataplane sets PortMap and HostPorts for the dataplane vcoild runs
// ("linux" or "vpp"): who serves hostPorts.
func (c *Conflist) ForDataplane(dataplane string) error {
	switch dataplane {
	case "linux":
		c.PortMap, c.HostPorts = true, false
	case "vpp":
		c.PortMap, c.HostPorts = false, true
	default:
		return fmt.Errorf("dataplane %q: want linux or vpp", dataplane)
	}
	return nil
}

// Render returns the conflist as JSON.
func (c Conflist) Render() ([]byte, error) {
	if c.PortMap && c.HostPorts {
		return nil, errors.New("conflist: hostPorts are served by vcoil (the VPP dataplane) or by the chained portmap plugin, not both")
	}
	vcoil := map[string]any{"type": "vcoil", "socket": c.Socket}
	if c.MTU > 0 {
		vcoil["mtu"] = c.MTU
	}
	if c.HostPorts {
		vcoil["capabilities"] = map[string]bool{"portMappings": true}
	}
	plugins := []any{vcoil}
	if c.PortMap {
		plugins = append(plugins, map[string]any{
			"type":         "portmap",
			"capabilities": map[string]bool{"portMappings": true},
		})
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": c.CNIVersion,
		"name":       c.Name,
		"plugins":    plugins,
	}, "", "  ")
}

// Result says what Install did.
type Result struct {
	Binaries []string // installed or replaced
	Conflist string   // path written
	// Earlier are configurations in ConfDir that sort before vcoil's: the
	// runtime uses the first, so they would win.
	Earlier []string
}

// Install copies every regular file of SourceDir into BinDir (skipping files
// whose content is already there) and writes the conflist.
func Install(opts Options) (Result, error) {
	var res Result
	entries, err := os.ReadDir(opts.SourceDir)
	if err != nil {
		return res, fmt.Errorf("read %s: %w", opts.SourceDir, err)
	}
	if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "vcoil" && e.Type().IsRegular() }) {
		return res, fmt.Errorf("%s has no vcoil binary", opts.SourceDir)
	}
	if err := os.MkdirAll(opts.BinDir, 0o755); err != nil {
		return res, err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src := filepath.Join(opts.SourceDir, e.Name())
		dst := filepath.Join(opts.BinDir, e.Name())
		same, err := sameContent(src, dst)
		if err != nil {
			return res, err
		}
		if same {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return res, err
		}
		if err := atomicfile.WriteFile(dst, data, 0o755); err != nil {
			return res, fmt.Errorf("install CNI binary %s: %w", e.Name(), err)
		}
		res.Binaries = append(res.Binaries, dst)
	}
	conf, err := opts.Conflist.Render()
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(opts.ConfDir, 0o755); err != nil {
		return res, err
	}
	res.Conflist = filepath.Join(opts.ConfDir, opts.ConfName)
	if err := atomicfile.WriteFile(res.Conflist, append(conf, '\n'), 0o644); err != nil {
		return res, fmt.Errorf("install CNI configuration: %w", err)
	}
	others, err := os.ReadDir(opts.ConfDir)
	if err != nil {
		return res, err
	}
	for _, o := range others {
		n := o.Name()
		if n != opts.ConfName && !strings.HasPrefix(n, ".") && isConf(n) && n < opts.ConfName {
			res.Earlier = append(res.Earlier, n)
		}
	}
	sort.Strings(res.Earlier)
	return res, nil
}

func isConf(name string) bool {
	for _, ext := range []string{".conf", ".conflist", ".json"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

func sameContent(a, b string) (bool, error) {
	fb, err := os.Open(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer fb.Close()
	db, err := io.ReadAll(fb)
	if err != nil {
		return false, err
	}
	da, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	return bytes.Equal(da, db), nil
}
