package linux

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/sourceguard"
)

// Source validation (package sourceguard): the node's table is made by
// Init, which also drops the elements of veths that are gone and adds
// those of the pods the kernel holds; SetupPod writes a pod's elements
// before it returns, TeardownPod removes them. It runs whether or not
// NetworkPolicies are enforced: it is the dataplane's, not the policy
// stack's.

// guard is the node's source guard, opened at its first use and kept: an
// nft table costs two runs of nft to open.
func (d *linuxDataplane) guard(ctx context.Context) (*sourceguard.Guard, error) {
	d.guardMu.Lock()
	defer d.guardMu.Unlock()
	if d.sources != nil {
		return d.sources, nil
	}
	var netns ns.NetNS // nil: the process's own namespace
	if d.cfg.NodeNetns != "" {
		var err error
		if netns, err = ns.GetNS(d.cfg.NodeNetns); err != nil {
			return nil, fmt.Errorf("source validation: open node network namespace %s: %w", d.cfg.NodeNetns, err)
		}
	}
	g, err := sourceguard.Open(ctx, netns, HostIfPrefix, d.log.WithName("sources"))
	if err != nil {
		if netns != nil {
			netns.Close()
		}
		return nil, fmt.Errorf("source validation: %w", err)
	}
	d.sources = g
	return g, nil
}

// syncSources makes the table, removes the elements of veths that no
// longer exist and adds the missing addresses of those that do (pods of a
// node that ran a vcoild without source validation get theirs in the
// transaction that makes the table). It runs at Init, before the CNI
// server serves: a pod set up meanwhile could lose its elements otherwise.
func (d *linuxDataplane) syncSources(ctx context.Context, node *namespace) error {
	g, err := d.guard(ctx)
	if err != nil {
		return err
	}
	pods, err := d.listPods(node)
	if err != nil {
		return fmt.Errorf("source validation: %w", err)
	}
	want := map[string]sourceguard.Entries{}
	for _, p := range pods {
		want[HostIfName(p.PodKey)] = sourceguard.Entries{Addrs: podAddrs(p)}
	}
	if err := g.Sync(ctx, want); err != nil {
		return fmt.Errorf("source validation: %w", err)
	}
	return nil
}

// podAddrs are the pod's addresses, the zero ones left out.
func podAddrs(pod dataplane.Pod) []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{pod.IPv4, pod.IPv6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// allowSources writes the elements of pod's veth host.
func (d *linuxDataplane) allowSources(ctx context.Context, host string, pod dataplane.Pod) error {
	g, err := d.guard(ctx)
	if err != nil {
		return err
	}
	return g.Allow(ctx, host, podAddrs(pod), pod.SourcePrefixes)
}

// checkSources reports the elements host lacks or has beyond pod's.
func (d *linuxDataplane) checkSources(ctx context.Context, host string, pod dataplane.Pod) error {
	g, err := d.guard(ctx)
	if err != nil {
		return err
	}
	return g.Check(ctx, host, podAddrs(pod), pod.SourcePrefixes)
}

// forgetSources removes the elements of veth host.
func (d *linuxDataplane) forgetSources(ctx context.Context, host string) error {
	g, err := d.guard(ctx)
	if err != nil {
		return err
	}
	return g.Forget(ctx, host)
}

// sourcesHealthy fails when the table is missing or differs.
func (d *linuxDataplane) sourcesHealthy(ctx context.Context) error {
	g, err := d.guard(ctx)
	if err != nil {
		return err
	}
	return g.Healthy(ctx)
}

var descSourceDrops = prometheus.NewDesc("vcoil_source_validation_drops_total",
	"Packets from pod interfaces that source validation dropped (a source not the pod's, a loopback destination, a router advertisement), by family.",
	[]string{"family"}, nil)

// sourceMetrics makes the table's drop counters a collector, read at each
// scrape.
type sourceMetrics struct{ d *linuxDataplane }

func (m sourceMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- descSourceDrops }

func (m sourceMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := m.d.guard(ctx)
	if err != nil {
		return
	}
	// A failed read leaves the drops out of this scrape.
	v4, v6, err := g.Drops(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descSourceDrops, prometheus.CounterValue, float64(v4), "ipv4")
	ch <- prometheus.MustNewConstMetric(descSourceDrops, prometheus.CounterValue, float64(v6), "ipv6")
}
