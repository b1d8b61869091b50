package vpp

import (
	"bufio"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// The uRPF plugin's nodes of the strict input check, as VPP names them
// (show errors, show interface features), and the reason it counts a
// dropped packet under.
const (
	URPFNodeIPv4   = "ip4-rx-urpf-strict"
	URPFNodeIPv6   = "ip6-rx-urpf-strict"
	urpfDropReason = "uRPF Drop"
)

// showErrors is the CLI command whose output holds VPP's error counters.
const showErrors = "show errors"

// sourceDropCollector exports the packets VPP's source validation dropped,
// read from VPP's error counters at each scrape through a channel of its
// own (the driver's is serialised with syncs that may take long). The
// counters start again at zero with each VPP process, as Prometheus
// counters may.
type sourceDropCollector struct {
	d    *driver
	desc *prometheus.Desc
}

func newSourceDropCollector(d *driver) *sourceDropCollector {
	return &sourceDropCollector{d: d, desc: prometheus.NewDesc(
		"vcoil_source_validation_drops_total",
		"Packets from pod interfaces that VPP dropped because their source address is not the pod's (nor one of its allowed source prefixes), by address family, since VPP started.",
		[]string{"family"}, nil)}
}

func (c *sourceDropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect exports nothing while VPP is not connected: a scrape then
// shows the series missing rather than a false zero.
func (c *sourceDropCollector) Collect(out chan<- prometheus.Metric) {
	v4, v6, ok := c.d.sourceDrops()
	if !ok {
		return
	}
	out <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v4), "ipv4")
	out <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v6), "ipv6")
}

// sourceDrops reads the uRPF nodes' drop counters; ok is false when VPP
// cannot be asked.
func (d *driver) sourceDrops() (v4, v6 uint64, ok bool) {
	d.mu.Lock()
	open := d.open
	d.mu.Unlock()
	if open == nil {
		return 0, 0, false
	}
	ch, err := open(1)
	if err != nil {
		return 0, 0, false
	}
	defer ch.Close()
	reply := &vlib.CliInbandReply{}
	if err := vppapi.Call(ch, &vlib.CliInband{Cmd: showErrors}, reply); err != nil {
		d.log.V(1).Info("cannot read VPP's error counters", "error", err.Error())
		return 0, 0, false
	}
	v4, v6 = parseURPFDrops(reply.Reply)
	return v4, v6, true
}

// parseURPFDrops sums the uRPF drop counters of "show errors" (a line per
// node, reason and thread: count, node, reason, severity).
func parseURPFDrops(out string) (v4, v6 uint64) {
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		line := s.Text()
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(line, urpfDropReason) {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch f[1] {
		case URPFNodeIPv4:
			v4 += n
		case URPFNodeIPv6:
			v6 += n
		}
	}
	return v4, v6
}
