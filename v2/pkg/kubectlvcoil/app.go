package kubectlvcoil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// App runs the verbs against a cluster.
type App struct {
	// Client reads the apiserver (no cache).
	Client client.Client
	// States reads the nodes' vcoild states.
	States StateReader
	// Out receives the report, ErrOut the problems that do not stop it.
	Out, ErrOut io.Writer
	// Output is OutputTable, OutputJSON or OutputYAML.
	Output string
	// Now is the time ages are counted to.
	Now func() time.Time
}

// ExitError ends the program with Code; Err, when set, is printed.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit code %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit codes: 0 for success (trace: allowed), 1 for a trace whose flow is
// not allowed (denied, rejected, dropped or only partly allowed), 2 for an
// error (trace: a verdict that could not be decided).
const (
	ExitNotAllowed = 1
	ExitFailure    = 2
)

// Pools prints the AddressPools.
func (a *App) Pools(ctx context.Context) error {
	var pools vcoilv2.AddressPoolList
	if err := a.Client.List(ctx, &pools); err != nil {
		return fmt.Errorf("list AddressPools: %w", err)
	}
	var blocks vcoilv2.AddressBlockList
	if err := a.Client.List(ctx, &blocks); err != nil {
		return fmt.Errorf("list AddressBlocks: %w", err)
	}
	var svcs corev1.ServiceList
	if err := a.Client.List(ctx, &svcs); err != nil {
		return fmt.Errorf("list Services: %w", err)
	}
	r := Pools(pools.Items, blocks.Items, svcs.Items)
	if r == nil {
		r = []Pool{}
	}
	return Write(a.Out, a.Output, r, func(w io.Writer) { PoolsTable(w, r) })
}

// Blocks prints the AddressBlocks (of node, when not empty) with their use
// from the nodes' states. A node whose state cannot be read shows "-" and
// its error goes to ErrOut; it fails only when no state could be read.
func (a *App) Blocks(ctx context.Context, node string) error {
	var blocks vcoilv2.AddressBlockList
	var opts []client.ListOption
	if node != "" {
		opts = append(opts, client.MatchingLabels{vcoilv2.LabelNode: node})
	}
	if err := a.Client.List(ctx, &blocks, opts...); err != nil {
		return fmt.Errorf("list AddressBlocks: %w", err)
	}
	var nodes []string
	for _, b := range blocks.Items {
		if n := b.Labels[vcoilv2.LabelNode]; n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	states, errs := a.readStates(ctx, nodes)
	for _, n := range nodes {
		if err := errs[n]; err != nil {
			fmt.Fprintf(a.ErrOut, "warning: %v\n", err)
		}
	}
	r := BlocksOf(blocks.Items, states, errs)
	if r.Blocks == nil {
		r.Blocks = []Block{}
	}
	if err := Write(a.Out, a.Output, r, func(w io.Writer) { BlocksTable(w, r) }); err != nil {
		return err
	}
	if len(nodes) > 0 && len(states) == 0 {
		return fmt.Errorf("the state of no node could be read (%d tried)", len(nodes))
	}
	return nil
}

func (a *App) readStates(ctx context.Context, nodes []string) (map[string]*nodestate.State, map[string]error) {
	states, errs := map[string]*nodestate.State{}, map[string]error{}
	for _, n := range nodes {
		st, err := a.States.NodeState(ctx, n)
		if err != nil {
			errs[n] = err
			continue
		}
		states[n] = st
	}
	return states, errs
}

// Pod prints one pod's report.
func (a *App) Pod(ctx context.Context, namespace, name string) error {
	var p corev1.Pod
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &p); err != nil {
		return fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	if p.Spec.NodeName == "" {
		return fmt.Errorf("pod %s/%s is not scheduled to a node yet", namespace, name)
	}
	st, err := a.States.NodeState(ctx, p.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	r := PodReportOf(&p, st)
	return Write(a.Out, a.Output, r, func(w io.Writer) { PodTable(w, r) })
}

// Node prints a node's whole state; -o json and yaml print the State as
// vcoild serves it.
func (a *App) Node(ctx context.Context, node string) error {
	st, err := a.States.NodeState(ctx, node)
	if err != nil {
		return err
	}
	return Write(a.Out, a.Output, st, func(w io.Writer) { NodeTable(w, st, a.now()) })
}

func (a *App) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// TraceArgs are trace's arguments and flags.
type TraceArgs struct {
	Src, Dst string
	// Namespace is used for pods and Services named without one.
	Namespace string
	Backend   string
	EntryNode string
}

// Trace prints the verdict on one flow; a flow not allowed ends in an
// ExitError with ExitNotAllowed, an undecided one with ExitFailure.
func (a *App) Trace(ctx context.Context, args TraceArgs) error {
	src, err := ParseSource(args.Src, args.Namespace)
	if err != nil {
		return err
	}
	dst, err := ParseDestination(args.Dst, args.Namespace)
	if err != nil {
		return err
	}
	loc, err := a.locator(ctx)
	if err != nil {
		return err
	}
	f := trace.Flow{Src: src.Endpoint, Port: dst.Port, Protocol: dst.Protocol, EntryNode: args.EntryNode}
	if args.Backend != "" {
		if f.Backend, err = netip.ParseAddr(args.Backend); err != nil {
			return fmt.Errorf("--backend %q: %w", args.Backend, err)
		}
	}
	if dst.Service != "" {
		if err := a.serviceDestination(ctx, dst, src, loc, &f); err != nil {
			return err
		}
	} else {
		f.Dst = dst.Endpoint
	}
	if f.Port == 0 {
		return fmt.Errorf("destination %q: a port is needed (DST:PORT[/PROTO])", args.Dst)
	}
	if f.Protocol == "" {
		f.Protocol = "tcp"
	}

	// Read the states of the nodes the trace names, until it names no new
	// one: the source's node first, whose frontends name the backends'.
	states, errs := map[string]*nodestate.State{}, map[string]error{}
	want := func(n string) {
		if _, tried := errs[n]; n != "" && states[n] == nil && !tried {
			st, err := a.States.NodeState(ctx, n)
			if err != nil {
				errs[n] = err
				fmt.Fprintf(a.ErrOut, "warning: %v\n", err)
				return
			}
			states[n] = st
		}
	}
	if src.IsPod() {
		if p, ok := loc.Pod(src.Namespace, src.Name); ok {
			want(p.Node)
		}
	} else if n, ok := loc.NodeByAddr(src.Addr); ok {
		want(n.Name)
	} else if p, ok := loc.PodByAddr(src.Addr); ok {
		want(p.Node)
	} else if !f.Dst.IsPod() {
		if f.EntryNode == "" && len(loc.Nodes) > 0 {
			f.EntryNode = loc.Nodes[0].Name
		}
		want(f.EntryNode)
	}
	var r trace.Result
	for range 4 {
		if r, err = trace.Trace(f, states, loc); err != nil {
			return err
		}
		before := len(states) + len(errs)
		want(r.Src.Node)
		want(r.Dst.Node)
		for _, p := range r.Paths {
			want(p.Dst.Node)
		}
		if len(states)+len(errs) == before {
			break
		}
	}
	if err := Write(a.Out, a.Output, r, func(w io.Writer) { TraceTable(w, r) }); err != nil {
		return err
	}
	switch r.Verdict {
	case trace.Allowed:
		return nil
	case trace.Unknown:
		return &ExitError{Code: ExitFailure}
	default:
		return &ExitError{Code: ExitNotAllowed}
	}
}

func (a *App) serviceDestination(ctx context.Context, dst Target, src Target, loc trace.Locator, f *trace.Flow) error {
	ns, name, _ := strings.Cut(dst.Service, "/")
	var svc corev1.Service
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
		return fmt.Errorf("get service %s: %w", dst.Service, err)
	}
	if len(svc.Spec.Ports) == 0 {
		return fmt.Errorf("service %s has no ports", dst.Service)
	}
	var ips []netip.Addr
	for _, s := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, a)
		}
	}
	if len(ips) == 0 {
		return fmt.Errorf("service %s has no cluster IP (headless?): trace one of its pods instead", dst.Service)
	}
	addr := ips[0]
	// The family of the source decides which cluster IP it reaches.
	var srcAddrs []netip.Addr
	if src.IsPod() {
		if p, ok := loc.Pod(src.Namespace, src.Name); ok {
			srcAddrs = p.IPs
		}
	} else {
		srcAddrs = []netip.Addr{src.Addr}
	}
	for _, ip := range ips {
		if slices.ContainsFunc(srcAddrs, func(s netip.Addr) bool { return s.Is4() == ip.Is4() }) {
			addr = ip
			break
		}
	}
	port := svc.Spec.Ports[0]
	if dst.PortName != "" || dst.Port != 0 {
		found := false
		for _, sp := range svc.Spec.Ports {
			if (dst.PortName != "" && sp.Name == dst.PortName) || (dst.Port != 0 && int(sp.Port) == int(dst.Port) &&
				(dst.Protocol == "" || strings.EqualFold(string(sp.Protocol), dst.Protocol))) {
				port, found = sp, true
				break
			}
		}
		if !found {
			return fmt.Errorf("service %s has no port %s", dst.Service, dst.portText())
		}
	}
	f.Dst = trace.Endpoint{Addr: addr, Service: dst.Service}
	f.Port = uint16(port.Port)
	if dst.Protocol == "" {
		f.Protocol = strings.ToLower(string(port.Protocol))
	}
	return nil
}

// locator lists the cluster's pods and nodes.
func (a *App) locator(ctx context.Context) (trace.Locator, error) {
	var loc trace.Locator
	var pods corev1.PodList
	if err := a.Client.List(ctx, &pods); err != nil {
		return loc, fmt.Errorf("list pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		pl := trace.PodLocation{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				pl.IPs = append(pl.IPs, a)
			}
		}
		loc.Pods = append(loc.Pods, pl)
	}
	var nodes corev1.NodeList
	if err := a.Client.List(ctx, &nodes); err != nil {
		return loc, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		nl := trace.NodeLocation{Name: n.Name}
		for _, ad := range n.Status.Addresses {
			if ad.Type != corev1.NodeInternalIP && ad.Type != corev1.NodeExternalIP {
				continue
			}
			if a, err := netip.ParseAddr(ad.Address); err == nil {
				nl.Addrs = append(nl.Addrs, a)
			}
		}
		loc.Nodes = append(loc.Nodes, nl)
	}
	sort.Slice(loc.Nodes, func(i, j int) bool { return loc.Nodes[i].Name < loc.Nodes[j].Name })
	return loc, nil
}

// Target is a parsed SRC or DST argument.
type Target struct {
	trace.Endpoint
	// Service is "namespace/name" for svc/NS/NAME.
	Service  string
	Port     uint16
	PortName string
	Protocol string
}

func (t Target) portText() string {
	s := t.PortName
	if s == "" {
		s = strconv.Itoa(int(t.Port))
	}
	if t.Protocol != "" {
		s += "/" + t.Protocol
	}
	return s
}

// ParseSource reads SRC: a pod (NS/NAME, or NAME in namespace) or an IP.
func ParseSource(s, namespace string) (Target, error) {
	t, err := parseTarget(s, namespace, false)
	if err != nil {
		return t, fmt.Errorf("source %q: %w", s, err)
	}
	return t, nil
}

// ParseDestination reads DST[:PORT[/PROTO]]: DST is a pod (NS/NAME, or NAME
// in namespace), a Service (svc/NS/NAME or svc/NAME; PORT is a service port,
// by number or name) or an IP ([ADDR] with a port for IPv6).
func ParseDestination(s, namespace string) (Target, error) {
	t, err := parseTarget(s, namespace, true)
	if err != nil {
		return t, fmt.Errorf("destination %q: %w", s, err)
	}
	return t, nil
}

func parseTarget(s, namespace string, withPort bool) (Target, error) {
	var t Target
	if a, err := netip.ParseAddr(s); err == nil {
		t.Addr = a
		return t, nil
	}
	head, tail := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return t, errors.New("no ] after [")
		}
		head, tail = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if a, err := netip.ParseAddr(head); err != nil || !a.Is6() {
			return t, fmt.Errorf("%q is no IPv6 address", head)
		}
	} else if i := strings.LastIndex(s, ":"); i >= 0 {
		head, tail = s[:i], s[i+1:]
	}
	if tail != "" || strings.HasSuffix(s, ":") {
		if !withPort {
			return t, errors.New("a source has no port")
		}
		port, proto, _ := strings.Cut(tail, "/")
		proto = strings.ToLower(proto)
		if proto != "" && proto != "tcp" && proto != "udp" && proto != "sctp" {
			return t, fmt.Errorf("protocol %q: want tcp, udp or sctp", proto)
		}
		t.Protocol = proto
		n, err := strconv.ParseUint(port, 10, 16)
		switch {
		case err == nil && n > 0:
			t.Port = uint16(n)
		case err != nil && strings.ContainsAny(port, "abcdefghijklmnopqrstuvwxyz"):
			t.PortName = port
		default:
			return t, fmt.Errorf("port %q: want a number from 1 to 65535 (or a Service's port name)", port)
		}
	}
	if a, err := netip.ParseAddr(head); err == nil {
		if t.PortName != "" {
			return t, fmt.Errorf("port %q of an address must be a number", t.PortName)
		}
		t.Addr = a
		return t, nil
	}
	parts := strings.Split(head, "/")
	if parts[0] == "svc" || parts[0] == "service" {
		switch len(parts) {
		case 2:
			t.Service = namespace + "/" + parts[1]
		case 3:
			t.Service = parts[1] + "/" + parts[2]
		default:
			return t, errors.New("want svc/NAMESPACE/NAME")
		}
		if !withPort {
			return t, errors.New("a Service cannot be a source")
		}
		return t, nil
	}
	if t.PortName != "" {
		return t, fmt.Errorf("port %q of a pod must be a number", t.PortName)
	}
	switch len(parts) {
	case 1:
		t.Namespace, t.Name = namespace, parts[0]
	case 2:
		t.Namespace, t.Name = parts[0], parts[1]
	default:
		return t, errors.New("want NAMESPACE/NAME, svc/NAMESPACE/NAME or an address")
	}
	if t.Name == "" || t.Namespace == "" {
		return t, errors.New("want NAMESPACE/NAME, svc/NAMESPACE/NAME or an address")
	}
	return t, nil
}
