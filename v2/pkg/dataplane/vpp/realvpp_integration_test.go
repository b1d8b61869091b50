package vpp_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// startRealVPP starts a real VPP (VCOIL_VPP_BIN) in a new node namespace
// with an af_packet uplink host-vppup on a veth, and a driver of the pod
// interface type VCOIL_VPP_POD_IF against it, Init done within ctx. cfg
// adjusts the driver's configuration; the test's cleanup closes the driver.
func startRealVPP(ctx context.Context, t *testing.T, label string, cfg func(*vpp.Config)) (*netnstest.NS, *vpptest.VPP, vpp.Dataplane) {
	t.Helper()
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, label)
	netnstest.Veth(t, node, "vppup", node, "vppup-peer")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")
	c := vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()), Uplink: "host-vppup",
		PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second,
	}
	if cfg != nil {
		cfg(&c)
	}
	d, err := vpp.New(c, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	start := time.Now()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Logf("connected and synced in %s", time.Since(start))
	return node, v, d
}
