package main

import (
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/cniinstall"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// hostPort on a VPP node through the whole CNI path (VCOIL_VPP_BIN): the
// conflist install-cni writes for --dataplane=vpp (vcoil with the
// portMappings capability, no portmap), libcni handing the runtime's port
// mappings to the real vcoil binary, vcoild with --dataplane=vpp making
// them in VPP. A client on the uplink's network (the node's end of VPP's
// uplink veth, 198.51.100.1) reaches the pod through the uplink's address
// 198.51.100.2 and the hostPort; again after vcoild restarts (the hostPort
// from its checkpoint) and after VPP restarts; a bad mapping fails the
// ADD naming the field; DEL ends the hostPort.
func TestVPPHostPortThroughTheCNIPath(t *testing.T) {
	netnstest.RequireRoot(t)
	vpptest.Binary(t) // skips without a VPP
	defaultPool(t)
	f := newFabric(t)
	n, v := newVPPNode(t, f, 44, "198.51.100.1/24", "--vpp-uplink-address", "198.51.100.2/24")
	c := cniinstall.Conflist{CNIVersion: "1.1.0", Name: "vcoil", Socket: n.socket}
	if err := c.ForDataplane("vpp"); err != nil {
		t.Fatal(err)
	}
	data, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	if n.conf, err = libcni.ConfListFromBytes(data); err != nil {
		t.Fatal(err)
	}

	bad := newPod(t, "vpp-hp-bad")
	if err := n.add(bad, map[string]any{"hostPort": 30999, "containerPort": 8080, "protocol": "icmp"}); err == nil ||
		!strings.Contains(err.Error(), `runtimeConfig.portMappings[0].protocol "icmp": want tcp, udp or sctp`) {
		t.Fatalf("ADD with a bad port mapping: %v", err)
	}
	p := newPod(t, "vpp-hp")
	n.mustAdd(p, map[string]any{"hostPort": 30999, "containerPort": 8080, "protocol": "tcp"})
	serve(t, p.ns, ":8080")
	reach := func(when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			return talk(n.ns, "198.51.100.2:30999")
		})
	}
	reach("after ADD")
	n.kill()
	n.start()
	reach("after vcoild restarted")
	v.Restart()
	reach("after VPP restarted")

	if err := n.del(p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if err := talk(n.ns, "198.51.100.2:30999"); err == nil {
		t.Fatal("the hostPort still answers after DEL")
	}
}
