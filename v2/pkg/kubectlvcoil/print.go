package kubectlvcoil

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Output formats (-o).
const (
	OutputTable = ""
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// CheckOutput refuses an unknown -o.
func CheckOutput(format string) error {
	switch format {
	case OutputTable, "table", OutputJSON, OutputYAML:
		return nil
	}
	return fmt.Errorf("output format %q: want json or yaml (or none, for tables)", format)
}

// Write prints v as JSON or YAML, or as the table tbl writes.
func Write(w io.Writer, format string, v any, tbl func(w io.Writer)) error {
	switch format {
	case OutputJSON:
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(data, '\n'))
		return err
	case OutputYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	default:
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		tbl(tw)
		return tw.Flush()
	}
}

// row writes one line of a table; empty cells at its end are left out, so
// that no line ends in padding.
func row(w io.Writer, cells ...string) {
	for len(cells) > 1 && cells[len(cells)-1] == "" {
		cells = cells[:len(cells)-1]
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func count(n int64) string {
	if n == math.MaxInt64 {
		return ">=2^63"
	}
	return strconv.FormatInt(n, 10)
}

func addrs(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return orDash(strings.Join(s, ","))
}

func prefixes(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return orDash(strings.Join(s, ","))
}

// PoolsTable writes the pools as a table.
func PoolsTable(w io.Writer, pools []Pool) {
	row(w, "NAME", "USAGE", "SUBNETS", "IPV4", "IPV6", "ALLOCATED", "FREE", "SERVES")
	for _, p := range pools {
		v4, v6 := "-", "-"
		if p.IPv4Addresses > 0 {
			v4 = count(p.IPv4Addresses)
		}
		if p.IPv6Addresses > 0 {
			v6 = count(p.IPv6Addresses)
		}
		alloc, free, serves := "", "", "pods"
		if p.LoadBalancer {
			alloc, free = fmt.Sprintf("%d addresses", p.AddressesAllocated), count(p.AddressesFree)+" addresses"
			serves = fmt.Sprintf("LoadBalancers (%d Services)", len(p.Services))
		} else {
			alloc, free = fmt.Sprintf("%d/%s blocks", p.BlocksAllocated, count(p.BlocksMax)), count(p.BlocksFree)+" blocks"
		}
		if p.Error != "" {
			free = "error: " + p.Error
		}
		row(w, p.Name, p.Usage, strings.Join(p.Subnets, ","), v4, v6, alloc, free, serves)
	}
}

// BlocksTable writes the blocks as a table; "-" stands for what a node's
// state did not tell.
func BlocksTable(w io.Writer, b Blocks) {
	row(w, "NODE", "BLOCK", "POOL", "PREFIXES", "NODE-SUBNET", "IN-USE", "FREE")
	for _, x := range b.Blocks {
		inUse, free := "-", "-"
		if x.InUse != nil {
			inUse = strconv.Itoa(*x.InUse)
		}
		if x.Free != nil {
			free = strconv.Itoa(*x.Free)
			if x.Draining {
				free += " (draining)"
			}
		}
		ns := ""
		if x.NodeSubnet {
			ns = "yes"
		}
		row(w, orDash(x.Node), x.Name, x.Pool, strings.Join(x.Prefixes, ","), orDash(ns), inUse, free)
	}
}

// PodTable writes a pod's report.
func PodTable(w io.Writer, r PodReport) {
	row(w, "Pod:", r.Namespace+"/"+r.Name)
	row(w, "Node:", orDash(r.Node))
	row(w, "IPs:", addrs(r.IPs))
	row(w, "Pool:", orDash(r.Pool))
	row(w, "Block:", orDash(r.Block))
	row(w, "NAT loopback:", addrs(r.NATLoopback))
	iface := "-"
	if r.Interface != nil {
		iface = fmt.Sprintf("%s %s (index %d)", r.Interface.Kind, r.Interface.Name, r.Interface.Index)
		if r.Interface.HostName != "" {
			iface += " on " + r.Interface.HostName
		}
	}
	row(w, "Interface:", iface)
	if r.ContainerID != "" {
		row(w, "Container:", fmt.Sprintf("%s (%s)", shortID(r.ContainerID), r.IfName))
	}
	if len(r.Backs) == 0 {
		row(w, "Backs:", "-")
	}
	for i, b := range r.Backs {
		label := ""
		if i == 0 {
			label = "Backs:"
		}
		row(w, label, fmt.Sprintf("%s %s %s -> :%d", b.Service, b.Kind, netip.AddrPortFrom(b.Address, b.Port).String()+"/"+b.Protocol, b.TargetPort))
	}
	switch {
	case r.Policies == nil:
		row(w, "Policies:", "vcoil's network policies do not run on the node")
	case !r.Policies.Known:
		row(w, "Policies:", "the node's policy agent does not list the pod")
	default:
		tier(w, "Admin ingress:", r.Policies.AdminIngress)
		rules(w, "Ingress:", r.Policies.Ingress)
		tier(w, "Baseline ingress:", r.Policies.BaselineIngress)
		tier(w, "Admin egress:", r.Policies.AdminEgress)
		rules(w, "Egress:", r.Policies.Egress)
		tier(w, "Baseline egress:", r.Policies.BaselineEgress)
	}
	for _, e := range r.Egresses {
		row(w, "Egress (tunnel):", fmt.Sprintf("%s via %s (%s) to %s", e.Egress, routers(e), orDash(e.Encapsulation), prefixes(e.Destinations)))
	}
	for _, s := range r.Warnings {
		row(w, "Warning:", s)
	}
	for _, s := range r.Errors {
		row(w, "Node error:", s)
	}
}

func rules(w io.Writer, label string, rs []NumberedRule) {
	if len(rs) == 0 {
		row(w, label, "not isolated (everything allowed)")
		return
	}
	for i, r := range rs {
		l := ""
		if i == 0 {
			l = label
		}
		row(w, l, fmt.Sprintf("%d: %s", r.Index, r.Text))
	}
}

// tier writes the rules of a ClusterNetworkPolicy tier, nothing when it
// has none.
func tier(w io.Writer, label string, rs []NumberedRule) {
	for i, r := range rs {
		l := ""
		if i == 0 {
			l = label
		}
		row(w, l, fmt.Sprintf("%d: %s", r.Index, r.Text))
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

func syncLine(now time.Time, s nodestate.Sync) string {
	line := "last " + ago(now, s.Last)
	if s.Duration > 0 {
		// Incremental syncs take microseconds: a duration rounded to
		// milliseconds would read as zero.
		line += ", took " + time.Duration(float64(s.Duration)*float64(time.Second)).Round(time.Microsecond).String()
	}
	if s.Errors > 0 {
		line += fmt.Sprintf(", %d failed attempts", s.Errors)
	}
	if s.Error != "" {
		line += ", last error: " + s.Error
	}
	return line
}

// NodeTable writes a node's whole state, section by section. now is the
// time ages are counted to.
func NodeTable(w io.Writer, st *nodestate.State, now time.Time) {
	row(w, "Node:", st.Node)
	row(w, "Dataplane:", st.Dataplane)
	row(w, "vcoild:", orDash(st.Version))
	row(w, "Collected:", ago(now, st.Collected))
	row(w, "Node subnet:", prefixes(st.NodeSubnet))
	row(w, "NAT loopback:", addrs(st.NATLoopback))
	for _, e := range st.Errors {
		row(w, "Error:", e)
	}
	fmt.Fprintln(w)
	row(w, "BLOCK", "POOL", "PREFIXES", "IN-USE", "FREE", "")
	for _, b := range st.Blocks {
		note := ""
		if b.NodeSubnet {
			note = "node subnet"
		}
		if b.Draining {
			note = strings.TrimPrefix(note+", draining", ", ")
		}
		row(w, b.Name, b.Pool, prefixes(b.Prefixes), strconv.Itoa(b.InUse), strconv.Itoa(b.Free), note)
	}
	fmt.Fprintln(w)
	if len(st.Pods) == 0 {
		row(w, "Pods:", "none")
	} else {
		row(w, "POD", "IPS", "BLOCK", "INTERFACE", "CONTAINER", "IFNAME")
	}
	for _, p := range st.Pods {
		name := p.Namespace + "/" + p.Name
		if p.Name == "" {
			name = "-"
		}
		iface := "-"
		if p.Interface != nil {
			iface = fmt.Sprintf("%s %s #%d", p.Interface.Kind, p.Interface.Name, p.Interface.Index)
		}
		row(w, name, addrs(p.IPs), orDash(p.Block), iface, shortID(p.ContainerID), p.IfName)
	}
	fmt.Fprintln(w)
	if st.Services == nil {
		row(w, "Services:", "vcoil's service proxy does not run on the node")
	} else {
		row(w, "Services:", st.Services.Renderer+", "+syncLine(now, st.Services.Sync))
		row(w, "FRONTEND", "KIND", "SERVICE", "BACKENDS", "", "")
		for _, f := range st.Services.Frontends {
			row(w, netip.AddrPortFrom(f.Address, f.Port).String()+"/"+f.Protocol, kind(f), f.Service, backendList(f.Backends, f.NoBackends))
			if f.FromNode != nil {
				row(w, "", "", "from the node:", backendList(f.FromNode.Backends, f.FromNode.NoBackends))
			}
		}
		for _, r := range st.Services.Rejected {
			row(w, "Rejected:", r.Service+": "+r.Reason)
		}
	}
	fmt.Fprintln(w)
	if st.Policies == nil {
		row(w, "Policies:", "vcoil's network policies do not run on the node")
	} else {
		row(w, "Policies:", st.Policies.Renderer+", "+syncLine(now, st.Policies.Sync))
		row(w, "Always allowed:", addrs(st.Policies.AlwaysAllowed))
		for i, d := range st.Policies.Denied {
			l := ""
			if i == 0 {
				l = "Denied:"
			}
			what := "ClusterNetworkPolicy " + orDash(d.Policy)
			if d.Policy == "" && d.Tier != "networkpolicy" {
				what = "vcoild's own rules"
			}
			if d.Tier == "networkpolicy" {
				what = "NetworkPolicy " + d.Policy
				if d.Group != "" {
					what = "NetworkPolicy group " + d.Group
				}
			}
			row(w, l, fmt.Sprintf("%d packets by %s (%s %s)", d.Packets, what, d.Tier, d.Direction))
		}
		if len(st.Policies.Pods) == 0 {
			row(w, "Pods:", "none")
		} else {
			row(w, "POD", "DIRECTION", "RULE", "", "", "")
		}
		for _, p := range st.Policies.Pods {
			name := p.Namespace + "/" + p.Name
			if len(p.Ingress)+len(p.Egress)+len(p.AdminIngress)+len(p.AdminEgress)+len(p.BaselineIngress)+len(p.BaselineEgress) == 0 {
				row(w, name, "-", "not isolated", "", "", "")
			}
			tierRows(w, name, "admin ingress", p.AdminIngress)
			policyRows(w, name, "ingress", p.Ingress)
			tierRows(w, name, "baseline ingress", p.BaselineIngress)
			tierRows(w, name, "admin egress", p.AdminEgress)
			policyRows(w, name, "egress", p.Egress)
			tierRows(w, name, "baseline egress", p.BaselineEgress)
		}
	}
	if st.Egress != nil && len(st.Egress.Pods) == 0 {
		fmt.Fprintln(w)
		row(w, "Egress clients:", "none")
	}
	if st.Egress != nil && len(st.Egress.Pods) > 0 {
		fmt.Fprintln(w)
		row(w, "EGRESS CLIENT", "EGRESS", "ROUTER", "DESTINATIONS", "", "")
		for _, p := range st.Egress.Pods {
			for _, e := range p.Egresses {
				row(w, p.Namespace+"/"+p.Name, e.Egress, routers(e), prefixes(e.Destinations))
			}
			if p.Error != "" {
				row(w, p.Namespace+"/"+p.Name, "error", p.Error, "", "", "")
			}
		}
	}
	if v := st.VPP; v != nil {
		fmt.Fprintln(w)
		row(w, "VPP:", fmt.Sprintf("connected %v, %s, incarnation %d, resync %s", v.Connected, orDash(v.Version), v.Incarnation, syncLine(now, v.Resync)))
		row(w, "INTERFACE", "INDEX", "UP", "ADDRESSES", "NAT", "ACLS (IN/OUT)")
		for _, i := range v.Interfaces {
			row(w, i.Name, strconv.Itoa(int(i.Index)), strconv.FormatBool(i.Up), prefixes(i.Addresses), orDash(i.NAT), fmt.Sprintf("%v/%v", i.InputACLs, i.OutputACLs))
		}
		// Each object kind is a table of its own: a blank line ends the
		// tabwriter's column block, so long ACL rules and NAT mappings do
		// not widen the interfaces' columns.
		if len(v.ACLs) > 0 {
			fmt.Fprintln(w)
			row(w, "ACL", "TAG / RULES", "", "", "", "")
		}
		for _, a := range v.ACLs {
			row(w, fmt.Sprintf("ACL %d", a.Index), a.Tag, fmt.Sprintf("%d rules", len(a.Rules)), "", "", "")
			for _, r := range a.Rules {
				row(w, "", r, "", "", "", "")
			}
		}
		if len(v.NATMappings) > 0 {
			fmt.Fprintln(w)
			row(w, "NAT MAPPING", "TAG", "LOCALS", "FLAGS", "", "")
		}
		for _, m := range v.NATMappings {
			var ls []string
			for _, l := range m.Locals {
				ls = append(ls, l.Address.String())
			}
			row(w, "NAT "+m.External.String()+"/"+m.Protocol, m.Tag, strings.Join(ls, ","), strings.Join(m.Flags, ","), "", "")
		}
	}
	for _, t := range st.NFTables {
		fmt.Fprintln(w)
		row(w, "nftables:", t.Family+" "+t.Name)
		for _, l := range strings.Split(strings.TrimRight(t.Text, "\n"), "\n") {
			// Tabs of nft's indentation would become table columns.
			fmt.Fprintln(w, strings.ReplaceAll(l, "\t", "    "))
		}
	}
}

// routers are the ClusterIPs an Egress's tunnels go to.
func routers(e nodestate.EgressUse) string {
	if len(e.Routers) > 0 {
		return addrs(e.Routers)
	}
	if e.Router.IsValid() {
		return e.Router.String()
	}
	return "-"
}

func backendList(backends []nodestate.Backend, none string) string {
	var bs []string
	for _, b := range backends {
		s := netip.AddrPortFrom(b.Address, b.Port).String()
		if b.Local {
			s += "(local)"
		}
		if b.Terminating {
			s += "(terminating)"
		}
		bs = append(bs, s)
	}
	if len(bs) == 0 {
		return "none: " + orDash(none)
	}
	return strings.Join(bs, ",")
}

func kind(f nodestate.Frontend) string {
	k := f.Kind
	if f.Local {
		k += " Local"
	}
	if f.Affinity > 0 {
		k += fmt.Sprintf(" affinity=%gs", float64(f.Affinity))
	}
	return k
}

func policyRows(w io.Writer, pod, dir string, rs []nodestate.Rule) {
	for i, r := range rs {
		row(w, pod, dir, fmt.Sprintf("%d: %s", i, trace.RuleString(r)), "", "", "")
	}
}

func tierRows(w io.Writer, pod, dir string, rs []nodestate.TierRule) {
	for i, r := range rs {
		row(w, pod, dir, fmt.Sprintf("%d: %s", i, trace.TierRuleString(r)), "", "", "")
	}
}

// TraceTable writes a trace's result.
func TraceTable(w io.Writer, r trace.Result) {
	f := r.Flow
	row(w, "Flow:", fmt.Sprintf("%s -> %s port %d/%s", f.Src, f.Dst, f.Port, f.Protocol))
	row(w, "Source:", r.Src.String())
	row(w, "Destination:", r.Dst.String())
	if s := r.Service; s != nil {
		row(w, "Service:", fmt.Sprintf("at node %s: %s", s.Node, s.Why))
	}
	for _, x := range r.Warnings {
		row(w, "Note:", x)
	}
	for i, p := range r.Paths {
		fmt.Fprintln(w)
		row(w, fmt.Sprintf("Path %d:", i+1), fmt.Sprintf("to %s port %d, seen from %s: %s", p.Dst, p.Port, p.Source, p.Verdict))
		for _, s := range p.Steps {
			line := fmt.Sprintf("%s %s: %s", s.Check, s.Result, s.Why)
			if s.Rule != "" {
				line += ": " + s.Rule
			}
			row(w, "", line)
		}
	}
	fmt.Fprintln(w)
	row(w, "Verdict:", strings.ToUpper(r.Verdict)+": "+r.Reason)
}
