// Package linux is vcoil's dataplane in the Linux kernel, for nodes without
// VPP and for tests on any Linux machine. It implements dataplane.Dataplane
// with one veth pair per pod interface and policy routing:
//
//   - in the pod: the CNI interface (eth0) with the pod's /32 and /128 and
//     nothing else on-link, a host route to 169.254.1.1 and default routes
//     via 169.254.1.1 and fe80::1;
//   - on the node: the other end, named from a hash of the pod key and
//     labelled with an alias holding the key, which holds 169.254.1.1/32
//     (scope host) and fe80::1/64 so that it answers ARP and NDP for the
//     gateway; a host route per pod address in the pod table (116), which a
//     rule at priority 2000 consults before main;
//   - source validation (package sourceguard): a pod's veth accepts only
//     packets from the pod's own addresses and allowed prefixes.
//
// It does not allocate addresses, export routes to other nodes (package
// routes does), render services or policies, or NAT. docs/linux-dataplane.md
// describes the result for operators.
package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vcoil/vcoil/v2/pkg/sourceguard"
)

// linuxDataplane keeps no record of pods: every call opens the namespaces it
// needs and reads what exists, so a restarted vcoild finds everything in the
// kernel. It remembers only the MTU it detected.
type linuxDataplane struct {
	cfg Config
	log logr.Logger

	mu sync.Mutex
	// detectedMTU and mtuFrom are set by the first detection that finds a
	// default route (Init, or a pod); 0 until then.
	detectedMTU int
	mtuFrom     string

	// guardMu guards sources, the source guard opened at its first use.
	guardMu sync.Mutex
	sources *sourceguard.Guard
}

// New returns the Linux dataplane for cfg. It checks that the node namespace
// can be opened; it changes nothing before Init.
func New(cfg Config, log logr.Logger) (dataplane.Dataplane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("linux dataplane config: %w", err)
	}
	d := &linuxDataplane{cfg: cfg, log: log}
	node, err := d.openNode()
	if err != nil {
		return nil, err
	}
	node.Close()
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(sourceMetrics{d}); err != nil {
			return nil, fmt.Errorf("linux dataplane metrics: %w", err)
		}
	}
	return d, nil
}

func (d *linuxDataplane) Name() string { return "linux" }

func (d *linuxDataplane) openNode() (*namespace, error) {
	n, err := openNamespace(d.cfg.NodeNetns)
	if err != nil {
		return nil, fmt.Errorf("open node %w", err)
	}
	return n, nil
}

// families are the address families the pod table serves.
var families = []struct {
	family int
	name   string
}{
	{netlink.FAMILY_V4, "IPv4"},
	{netlink.FAMILY_V6, "IPv6"},
}

// nodeSysctls make the node namespace a router between its uplink and the
// pod veths. Per-veth settings are in hostSysctls.
var nodeSysctls = []kernelns.Sysctl{
	{Key: "net/ipv4/ip_forward", Value: "1"},
	{Key: "net/ipv6/conf/all/forwarding", Value: "1"},
}

// Init enables forwarding in the node namespace, installs, for IPv4 and
// IPv6, the rule "from all lookup <PodTable> priority <PodRulePriority>",
// and makes or adopts the source validation table, whose elements it
// reconciles with the pods the node holds (syncSources). Running it again
// changes nothing.
func (d *linuxDataplane) Init(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	node, err := d.openNode()
	if err != nil {
		return err
	}
	defer node.Close()

	if err := node.SetSysctls(nodeSysctls...); err != nil {
		return err
	}
	for _, f := range families {
		ok, err := d.hasPodRule(node, f.family)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		if err := node.NL.RuleAdd(d.podRule(f.family)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add %s rule from all lookup %d priority %d: %w", f.name, d.cfg.PodTable, d.cfg.PodRulePriority, err)
		}
		d.log.Info("added pod table rule", "family", f.name, "table", d.cfg.PodTable, "priority", d.cfg.PodRulePriority)
	}
	if err := d.syncSources(ctx, node); err != nil {
		return err
	}
	mtu, from, err := d.mtu(node)
	if err != nil {
		return err
	}
	d.log.Info("linux dataplane initialised", "node", node.Path, "podTable", d.cfg.PodTable,
		"rulePriority", d.cfg.PodRulePriority, "mtu", mtu, "mtuFrom", from)
	return nil
}

// Healthy reports what keeps pods from being reachable: a missing rule or
// forwarding switched off in the node namespace; and a missing (or
// changed) source validation table, which leaves pods free to forge their
// sources.
func (d *linuxDataplane) Healthy(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	node, err := d.openNode()
	if err != nil {
		return err
	}
	defer node.Close()

	var errs []error
	for _, f := range families {
		ok, err := d.hasPodRule(node, f.family)
		switch {
		case err != nil:
			errs = append(errs, err)
		case !ok:
			errs = append(errs, fmt.Errorf("%s rule from all lookup %d priority %d is missing in %s", f.name, d.cfg.PodTable, d.cfg.PodRulePriority, node.Path))
		}
	}
	for _, s := range nodeSysctls {
		v, err := node.ReadSysctl(s.Key)
		switch {
		case err != nil:
			errs = append(errs, err)
		case v != s.Value:
			errs = append(errs, fmt.Errorf("sysctl %s is %s, want %s, in %s", s.Key, v, s.Value, node.Path))
		}
	}
	if err := d.sourcesHealthy(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("linux dataplane not ready: %w", errors.Join(errs...))
	}
	return nil
}

func (d *linuxDataplane) podRule(family int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family
	r.Table = d.cfg.PodTable
	r.Priority = d.cfg.PodRulePriority
	return r
}

// hasPodRule looks for the rule exactly: same priority and table, no
// selector. A rule with a selector would leave some lookups out.
func (d *linuxDataplane) hasPodRule(node *namespace, family int) (bool, error) {
	rules, err := dump(func() ([]netlink.Rule, error) {
		return node.NL.RuleListFiltered(family, &netlink.Rule{Table: d.cfg.PodTable}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return false, fmt.Errorf("list rules in %s: %w", node.Path, err)
	}
	for _, r := range rules {
		if r.Priority == d.cfg.PodRulePriority && r.Table == d.cfg.PodTable && r.Src == nil && r.Dst == nil &&
			r.IifName == "" && r.OifName == "" && r.Mark == 0 && !r.Invert && r.Tos == 0 {
			return true, nil
		}
	}
	return false, nil
}

// mtu is the MTU for pod veths and where it came from, for logs. The
// uplink's MTU is detected once per Dataplane: reading the main table may be
// expensive where a routing daemon keeps a full table there, and pods of one
// node should not get different MTUs because the uplink changed meanwhile.
// A node without a default route yet (its network still coming up) gets
// DefaultMTU and is asked again next time.
func (d *linuxDataplane) mtu(node *namespace) (int, string, error) {
	if d.cfg.MTU != 0 {
		return d.cfg.MTU, "config", nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.detectedMTU != 0 {
		return d.detectedMTU, d.mtuFrom, nil
	}
	mtu, uplink, err := uplinkMTU(node)
	if err != nil {
		return 0, "", err
	}
	if mtu == 0 {
		return DefaultMTU, "default (no default route)", nil
	}
	d.detectedMTU, d.mtuFrom = mtu, "uplink "+uplink
	return d.detectedMTU, d.mtuFrom, nil
}

// uplinkMTU returns the MTU and name of the link of the main table's default
// route (IPv4 first, then IPv6), or 0 without a default route.
func uplinkMTU(node *namespace) (int, string, error) {
	for _, f := range families {
		routes, err := node.routes(f.family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return 0, "", fmt.Errorf("list %s routes of the main table in %s: %w", f.name, node.Path, err)
		}
		for _, r := range routes {
			if !isDefault(r.Dst) {
				continue
			}
			index := r.LinkIndex
			if index == 0 && len(r.MultiPath) > 0 {
				index = r.MultiPath[0].LinkIndex
			}
			if index == 0 {
				continue
			}
			link, err := node.NL.LinkByIndex(index)
			if err != nil {
				return 0, "", fmt.Errorf("link %d of the default route in %s: %w", index, node.Path, err)
			}
			return link.Attrs().MTU, link.Attrs().Name, nil
		}
	}
	return 0, "", nil
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}
