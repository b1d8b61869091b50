package main

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// On the VPP dataplane the node state names the pod's VPP interface (the
// one VPP's dump lists at that index), VPP's connection and resync, and
// the NAT44 static mapping of a Service's cluster IP to the pod.
func TestNodeStateOnVPP(t *testing.T) {
	netnstest.RequireRoot(t)
	vpptest.Binary(t) // skips without a VPP
	defaultPool(t)
	f := newFabric(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, _ := newVPPNode(t, f, 45, "", "--service-cidr", "10.0.0.0/24", "--service-min-sync-period", "100ms")
	backend := newPod(t, "vpp-state-backend")
	n.mustAdd(backend)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vpp-state-web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.91", Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "vpp-state-web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "vpp-state-web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend.ipv4().String()}, NodeName: ptr.To(n.name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, o := range []client.Object{svc, slice} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	// Until the proxy has the endpoints, the frontend is mapped to the
	// reject sink.
	frontend := netip.MustParseAddrPort("10.0.0.91:80")
	want := []nodestate.VPPNATLocal{{Address: netip.AddrPortFrom(backend.ipv4(), 8080)}}
	var st *nodestate.State
	var m nodestate.VPPNATMapping
	poll.Eventually(t, 60*time.Second, func() error {
		var err error
		st, err = nodestate.Get(ctx, http.DefaultClient, n.state)
		if err != nil {
			return err
		}
		i := -1
		if st.VPP != nil {
			i = slices.IndexFunc(st.VPP.NATMappings, func(m nodestate.VPPNATMapping) bool { return m.External == frontend })
		}
		if i < 0 {
			return fmt.Errorf("no NAT44 mapping of %s yet; errors %q", frontend, st.Errors)
		}
		if m = st.VPP.NATMappings[i]; !slices.Equal(m.Locals, want) {
			return fmt.Errorf("the mapping of %s goes to %v, not yet to %v", frontend, m.Locals, want)
		}
		return nil
	})
	if len(st.Errors) > 0 {
		t.Errorf("errors in the state: %q", st.Errors)
	}
	if st.Dataplane != "vpp" || !st.VPP.Connected || st.VPP.Incarnation < 1 || st.VPP.Resync.Last.IsZero() || !strings.HasPrefix(st.VPP.Version, "25.10") {
		t.Errorf("VPP section: dataplane %s, connected %t, incarnation %d, resync %+v, version %q",
			st.Dataplane, st.VPP.Connected, st.VPP.Incarnation, st.VPP.Resync, st.VPP.Version)
	}
	if m.Protocol != "TCP" || !strings.HasPrefix(m.Tag, "vcoil-svc") {
		t.Errorf("mapping %+v, want TCP tagged by the services renderer", m)
	}

	i := slices.IndexFunc(st.Pods, func(x nodestate.Pod) bool { return x.ContainerID == backend.id })
	if i < 0 || st.Pods[i].Interface == nil {
		t.Fatalf("the state lacks pod %s or its interface: %+v", backend.id, st.Pods)
	}
	pi := *st.Pods[i].Interface
	if pi.Kind != vpptest.PodInterface() {
		t.Errorf("pod interface %+v, want kind %s", pi, vpptest.PodInterface())
	}
	j := slices.IndexFunc(st.VPP.Interfaces, func(x nodestate.VPPInterface) bool { return x.Index == pi.Index })
	if j < 0 || st.VPP.Interfaces[j].Name != pi.Name || !strings.Contains(st.VPP.Interfaces[j].Tag, backend.id) || st.VPP.Interfaces[j].NAT == "" {
		t.Errorf("the pod's interface %+v is not VPP's, tagged with its container and a NAT44 role: %+v", pi, st.VPP.Interfaces)
	}
}
