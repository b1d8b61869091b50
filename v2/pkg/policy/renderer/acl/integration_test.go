package acl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// itBlock is the node's block in the real-VPP tests; pods get 10.100.0.2
// and up.
var itBlock = netip.MustParsePrefix("10.100.0.0/28")

// itPod is a pod of a real-VPP test: a namespace wired by vcoil's VPP
// driver that serves TCP 8080 (a greeting with its name and the client's
// address, then an echo of each line) and TCP 9090 (the same echo, and a
// line "pushed" each time the test writes to push, without waiting for
// the client: a server that pushes data, like a watch).
type itPod struct {
	name string
	id   renderer.PodID
	ns   *netnstest.NS
	ip   netip.Addr
	push chan struct{}
}

type itEnv struct {
	t    *testing.T
	ctx  context.Context
	v    *vpptest.VPP
	d    vpp.Dataplane
	r    *Renderer
	reg  *prometheus.Registry
	pods map[string]*itPod
}

// newITEnv starts a real VPP in a node namespace with vcoil's driver and
// the renderer, and wires the pods named.
func newITEnv(t *testing.T, names ...string) *itEnv {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "aclnode")
	v := vpptest.Start(t, bin, node.Path())
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{itBlock}); err != nil {
		t.Fatal(err)
	}
	e := &itEnv{t: t, ctx: ctx, v: v, d: d, pods: map[string]*itPod{}}
	t.Cleanup(func() {
		if t.Failed() {
			e.logVPP("show acl-plugin acl", "show acl-plugin interface", "show acl-plugin sessions", "show interface addr")
		}
	})
	for i, name := range names {
		ns := netnstest.New(t, "aclpod-"+name)
		p := &itPod{name: name, id: renderer.PodID{Namespace: "it", Name: name}, ns: ns,
			ip: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)}), push: make(chan struct{}, 4)}
		if _, err := d.SetupPod(ctx, dataplane.Pod{
			PodKey: dataplane.PodKey{ContainerID: "acl-it-" + name, IfName: "eth0"}, Netns: ns.Path(),
			Namespace: "it", Name: name, IPv4: p.ip,
		}); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		p.serve(t)
		e.pods[name] = p
	}
	e.reg = prometheus.NewRegistry()
	e.r, err = New(d, Config{Registry: e.reg, StatsSocket: filepath.Join(v.Dir, "stats.sock")}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// greet answers each connection l accepts with a line naming the pod and
// the client's address as the pod sees it, then echoes what the client
// sends.
func (p *itPod) greet(l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "%s %s\n", p.name, c.RemoteAddr()); err == nil {
					_, _ = io.Copy(c, c)
				}
			}()
		}
	}()
}

func (p *itPod) serve(t *testing.T) {
	p.greet(p.ns.Listen("tcp4", ":8080"))
	pusher := p.ns.Listen("tcp4", ":9090")
	go func() {
		for {
			c, err := pusher.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var mu sync.Mutex
				write := func(s string) error {
					mu.Lock()
					defer mu.Unlock()
					_, err := io.WriteString(c, s)
					return err
				}
				if err := write(p.name + "\n"); err != nil {
					return
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					rd := bufio.NewReader(c)
					for {
						line, err := rd.ReadString('\n')
						if err != nil || write(line) != nil {
							return
						}
					}
				}()
				for {
					select {
					case <-p.push:
						if write("pushed\n") != nil {
							return
						}
					case <-done:
						return
					}
				}
			}()
		}
	}()
}

// itConn is an open TCP connection from one pod to another.
type itConn struct {
	c  net.Conn
	rd *bufio.Reader
}

// connect opens a TCP connection from pod from to pod to's port and reads
// its greeting, within a second and a half.
func (e *itEnv) connect(from, to *itPod, port uint16) (*itConn, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 1500*time.Millisecond)
	defer cancel()
	target := netip.AddrPortFrom(to.ip, port).String()
	c, err := from.ns.Dial(ctx, "tcp4", target)
	if err != nil {
		return nil, fmt.Errorf("pod %s -> %s (pod %s): %w", from.name, target, to.name, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("pod %s -> %s (pod %s): greeting: %w", from.name, target, to.name, err)
	}
	if !strings.HasPrefix(line, to.name) {
		c.Close()
		return nil, fmt.Errorf("pod %s -> %s: greeting %q, want pod %s's", from.name, target, line, to.name)
	}
	e.t.Cleanup(func() { c.Close() })
	return &itConn{c: c, rd: rd}, nil
}

// echo sends a line on an echo connection and reads it back.
func (c *itConn) echo() error {
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c.c, "ping"); err != nil {
		return err
	}
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	if line != "ping\n" {
		return fmt.Errorf("echo: got %q", line)
	}
	return nil
}

// pushed reads a line the server pushed.
func (c *itConn) pushed() error {
	_ = c.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return fmt.Errorf("pushed line: %w", err)
	}
	if line != "pushed\n" {
		return fmt.Errorf("pushed line: got %q", line)
	}
	return nil
}

// reaches waits until from reaches to's echo port, then checks the echo.
func (e *itEnv) reaches(from, to *itPod) {
	e.t.Helper()
	poll.Eventually(e.t, 10*time.Second, func() error {
		c, err := e.connect(from, to, 8080)
		if err != nil {
			return err
		}
		defer c.c.Close()
		return c.echo()
	})
}

// refused checks, three times, that from cannot open a connection to to.
func (e *itEnv) refused(from, to *itPod) {
	e.t.Helper()
	for range 3 {
		if c, err := e.connect(from, to, 8080); err == nil {
			c.c.Close()
			e.t.Fatalf("pod %s reached pod %s, which its policy denies", from.name, to.name)
		}
	}
}

func (e *itEnv) render(pods ...renderer.PodRules) {
	e.t.Helper()
	if err := e.r.Render(e.ctx, renderer.Txn{Pods: pods}); err != nil {
		e.t.Fatalf("Render: %v", err)
	}
}

// admits is pod p isolated for ingress, admitting TCP 8080 and 9090 from
// peers.
func admits(p *itPod, peers ...*itPod) renderer.PodRules {
	pr := renderer.PodRules{Pod: p.id, IPs: []netip.Addr{p.ip}}
	for _, q := range peers {
		for _, port := range []uint16{8080, 9090} {
			pr.Ingress = append(pr.Ingress, renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
				SrcNetwork: renderer.HostNetwork(q.ip), SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(port)})
		}
	}
	renderer.SortRules(pr.Ingress)
	pr.Ingress = append(pr.Ingress, renderer.DenyAll)
	return pr
}

func unrestricted(p *itPod) renderer.PodRules {
	return renderer.PodRules{Pod: p.id, IPs: []netip.Addr{p.ip}}
}

// cli runs VPP CLI commands and returns their output.
func (e *itEnv) cli(cmds ...string) string {
	conn, err := core.Connect(socketclient.NewVppClient(e.v.APISocket))
	if err != nil {
		e.t.Fatalf("VPP CLI: %v", err)
	}
	defer conn.Disconnect()
	ch, err := conn.NewAPIChannel()
	if err != nil {
		e.t.Fatalf("VPP CLI: %v", err)
	}
	defer ch.Close()
	var out strings.Builder
	for _, cmd := range cmds {
		reply := &vlib.CliInbandReply{}
		if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
			e.t.Fatalf("VPP CLI %q: %v", cmd, err)
		}
		fmt.Fprintf(&out, "vpp# %s\n%s", cmd, reply.Reply)
	}
	return out.String()
}

func (e *itEnv) logVPP(cmds ...string) { e.t.Log(e.cli(cmds...)) }

// matched is the renderer's hit counter of table's ACL.
func (e *itEnv) matched(table string) float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "vcoil_vpp_policy_acl_matched_packets_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == table {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// metricSum sums the values of metric whose label is value.
func (e *itEnv) metricSum(metric, label, value string) float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
