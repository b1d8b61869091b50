package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// startLBController runs vcoil-controller with the LoadBalancer allocator
// and returns a function that stops it.
func startLBController(t *testing.T, lb LoadBalancerOptions) func() {
	t.Helper()
	stop, _ := startLBControllerWithMetrics(t, lb)
	return stop
}

// startLBControllerWithMetrics also returns the registry of its gauges.
func startLBControllerWithMetrics(t *testing.T, lb LoadBalancerOptions) (func(), *prometheus.Registry) {
	t.Helper()
	if lb.DefaultPool == "" {
		lb.DefaultPool = vcoilv2.DefaultLBPool
	}
	lb.Enabled = true
	c := runController(t, Options{NodeGCInterval: time.Hour, BlockRequestConcurrency: 1, LoadBalancer: lb})
	return c.stop, c.registry
}

// lbNamespace creates a namespace for the test's Services and deletes them
// when the test ends (envtest runs no namespace controller).
func lbNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lb-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(ctx, &corev1.Service{}, client.InNamespace(ns.Name))
		_ = env.Client.Delete(ctx, ns)
	})
	return ns.Name
}

func createLBPool(t *testing.T, name string, subnets ...vcoilv2.SubnetSet) {
	t.Helper()
	p := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		// A LoadBalancer pool gives single addresses: block sizes play no
		// part, 0 keeps a /30 valid for any check of them.
		Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer, BlockSizeBits: 0, Subnets: subnets},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatalf("create LoadBalancer pool %s: %v", name, err)
	}
}

type svcOpt func(*corev1.Service)

func withFamilies(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(policy)
		s.Spec.IPFamilies = fams
	}
}

func withClass(c string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(c) }
}
func withLBIP(ip string) svcOpt { return func(s *corev1.Service) { s.Spec.LoadBalancerIP = ip } }
func withAnnotation(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func createLBService(t *testing.T, ns, name string, opts ...svcOpt) *corev1.Service {
	t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatalf("create service %s/%s: %v", ns, name, err)
	}
	return s
}

func getService(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s := &corev1.Service{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// ingressOf is a Service's ingress IPs; every entry must be ipMode VIP.
func ingressOf(s *corev1.Service) ([]string, error) {
	var ips []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP {
			return nil, fmt.Errorf("ingress %s of %s has ipMode %v, want VIP", in.IP, s.Name, in.IPMode)
		}
		ips = append(ips, in.IP)
	}
	return ips, nil
}

// waitIngress waits until the Service's ingress is exactly want.
func waitIngress(t *testing.T, ns, name string, want ...string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		s := &corev1.Service{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
			return err
		}
		got, err := ingressOf(s)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("service %s has ingress %v, want %v", name, got, want)
		}
		return nil
	})
}

// waitEvent waits for an Event of reason on the Service whose note
// contains text, and returns it.
func waitEvent(t *testing.T, ns, name, reason, text string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name != name {
				continue
			}
			if e.Reason == reason && strings.Contains(e.Note, text) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no %s event mentioning %q on service %s; events: %q", reason, text, name, seen)
	})
}

// stillIngress checks that the Service keeps want while the controller has
// had every chance to act: it waits for the marker Service, created after,
// to get its address (one reconcile at a time, in order of events).
func stillIngress(t *testing.T, ns, name string, want ...string) {
	t.Helper()
	got, err := ingressOf(getService(t, ns, name))
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("service %s has ingress %v (%v), want %v", name, got, err, want)
	}
}

func deleteService(t *testing.T, ns, name string) {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Delete(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestLoadBalancerServiceGetsAnAddressThatIsReleasedOnDeleteAndTypeChange(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/30"))
	startLBController(t, LoadBalancerOptions{})

	createLBService(t, ns, "a")
	waitIngress(t, ns, "a", "203.0.113.1")
	waitEvent(t, ns, "a", ReasonLBAddressesAssigned, "203.0.113.1")
	createLBService(t, ns, "b")
	waitIngress(t, ns, "b", "203.0.113.2")

	deleteService(t, ns, "a")
	createLBService(t, ns, "c")
	waitIngress(t, ns, "c", "203.0.113.1")

	// b becomes a ClusterIP Service: its address leaves its status and is
	// given again.
	b := getService(t, ns, "b")
	b.Spec.Type = corev1.ServiceTypeClusterIP
	b.Spec.Ports[0].NodePort = 0
	if err := env.Client.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitIngress(t, ns, "b")
	createLBService(t, ns, "d")
	waitIngress(t, ns, "d", "203.0.113.2")
	stillIngress(t, ns, "c", "203.0.113.1")
}

func TestLoadBalancerRequestedAddresses(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/29"))
	createLBPool(t, "other", v4("198.51.100.0/30"))
	startLBController(t, LoadBalancerOptions{})

	// spec.loadBalancerIP in a pool and free: honoured, the network address
	// too (only the automatic choice skips it).
	createLBService(t, ns, "by-spec", withLBIP("203.0.113.5"))
	waitIngress(t, ns, "by-spec", "203.0.113.5")
	createLBService(t, ns, "network", withAnnotation(vcoilv2.AnnotationLBIPs, "203.0.113.0"))
	waitIngress(t, ns, "network", "203.0.113.0")
	// Without a named pool, a requested address may be in any LoadBalancer
	// pool.
	createLBService(t, ns, "by-annotation", withAnnotation(vcoilv2.AnnotationLBIPs, "198.51.100.2"))
	waitIngress(t, ns, "by-annotation", "198.51.100.2")

	createLBService(t, ns, "taken", withAnnotation(vcoilv2.AnnotationLBIPs, "203.0.113.5"))
	waitEvent(t, ns, "taken", ReasonLBAddressInUse, ns+"/by-spec")
	createLBService(t, ns, "outside", withLBIP("198.51.100.200"))
	waitEvent(t, ns, "outside", ReasonLBAddressNotInPool, "198.51.100.200")
	createLBService(t, ns, "wrong-pool", withAnnotation(vcoilv2.AnnotationLBPool, "other"), withAnnotation(vcoilv2.AnnotationLBIPs, "203.0.113.6"))
	waitEvent(t, ns, "wrong-pool", ReasonLBAddressNotInPool, `"other"`)
	createLBService(t, ns, "garbage", withAnnotation(vcoilv2.AnnotationLBIPs, "lb.example"))
	waitEvent(t, ns, "garbage", ReasonLBBadRequest, "lb.example")
	createLBService(t, ns, "two", withLBIP("203.0.113.3"), withAnnotation(vcoilv2.AnnotationLBIPs, "203.0.113.4"))
	waitEvent(t, ns, "two", ReasonLBBadRequest, "two IPv4 addresses")
	createLBService(t, ns, "nopool", withAnnotation(vcoilv2.AnnotationLBPool, "missing"))
	waitEvent(t, ns, "nopool", ReasonLBPoolNotFound, `"missing"`)

	// A marker Service created last is reconciled after every one above:
	// once it has its address, none of those got one.
	createLBService(t, ns, "marker")
	waitIngress(t, ns, "marker", "203.0.113.1")
	for _, name := range []string{"taken", "outside", "wrong-pool", "garbage", "two", "nopool"} {
		stillIngress(t, ns, name)
	}

	// Freeing the address lets the waiting request through.
	deleteService(t, ns, "by-spec")
	// The release wakes the Service that asked for the address.
	waitIngress(t, ns, "taken", "203.0.113.5")

	// A Service whose annotation comes to name a pool that does not exist
	// (a typo) is told so and keeps the address it serves on.
	s := getService(t, ns, "marker")
	s.Annotations = map[string]string{vcoilv2.AnnotationLBPool: "typo"}
	if err := env.Client.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ns, "marker", ReasonLBPoolNotFound, `"typo"`)
	// Reconciles run one at a time: once a Service created now has its
	// address, the marker's reconcile has written its status.
	createLBService(t, ns, "marker2")
	waitIngress(t, ns, "marker2", "203.0.113.2")
	stillIngress(t, ns, "marker", "203.0.113.1")
}

func TestLoadBalancerPoolExhaustionAndRetry(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/30"))
	startLBController(t, LoadBalancerOptions{})

	createLBService(t, ns, "a")
	waitIngress(t, ns, "a", "203.0.113.1")
	createLBService(t, ns, "b")
	waitIngress(t, ns, "b", "203.0.113.2")
	createLBService(t, ns, "c")
	waitEvent(t, ns, "c", ReasonLBPoolExhausted, vcoilv2.DefaultLBPool)
	stillIngress(t, ns, "c")
	waitLBPoolStatus(t, vcoilv2.DefaultLBPool, 2, 2, metav1.ConditionFalse, vcoilv2.ReasonExhausted)

	deleteService(t, ns, "a")
	// No touch: the release wakes the waiting Service.
	waitIngress(t, ns, "c", "203.0.113.1")
	stillIngress(t, ns, "b", "203.0.113.2")
}

func waitLBPoolStatus(t *testing.T, name string, max, allocated int64, available metav1.ConditionStatus, reason string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		p := &vcoilv2.AddressPool{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, vcoilv2.PoolAvailable)
		if p.Status.AddressesMax != max || p.Status.AddressesAllocated != allocated || c == nil ||
			c.Status != available || c.Reason != reason || p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("pool %s status %+v, want max %d, allocated %d, Available %s/%s", name, p.Status, max, allocated, available, reason)
		}
		if !slices.Contains(p.Finalizers, vcoilv2.Finalizer) {
			return fmt.Errorf("pool %s has no finalizer", name)
		}
		return nil
	})
}

func TestLoadBalancerPoolStatusAndFinalizer(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/29"), v4("198.51.100.0/31"))
	_, reg := startLBControllerWithMetrics(t, LoadBalancerOptions{})
	waitLBPoolStatus(t, vcoilv2.DefaultLBPool, 6+2, 0, metav1.ConditionTrue, vcoilv2.ReasonAddressesFree)
	createLBService(t, ns, "a")
	waitIngress(t, ns, "a", "203.0.113.1")
	waitLBPoolStatus(t, vcoilv2.DefaultLBPool, 8, 1, metav1.ConditionTrue, vcoilv2.ReasonAddressesFree)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP vcoil_pool_addresses_allocated The number of a LoadBalancer pool's addresses held by Services.
# TYPE vcoil_pool_addresses_allocated gauge
vcoil_pool_addresses_allocated{pool="default-lb"} 1
# HELP vcoil_pool_addresses_max The number of addresses a LoadBalancer pool can give to Services.
# TYPE vcoil_pool_addresses_max gauge
vcoil_pool_addresses_max{pool="default-lb"} 8
`), "vcoil_pool_addresses_allocated", "vcoil_pool_addresses_max"); err != nil {
		t.Errorf("address gauges: %v", err)
	}

	// The pool stays while a Service holds one of its addresses, and the
	// Service keeps it.
	pool := &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: vcoilv2.DefaultLBPool}}
	if err := env.Client.Delete(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	createLBService(t, ns, "late")
	waitEvent(t, ns, "late", ReasonLBPoolDeleting, vcoilv2.DefaultLBPool)
	p := &vcoilv2.AddressPool{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), p); err != nil {
		t.Fatalf("pool gone while service a holds its address: %v", err)
	}
	stillIngress(t, ns, "a", "203.0.113.1")
	deleteService(t, ns, "a")
	poll.Eventually(t, 20*time.Second, func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pool), &vcoilv2.AddressPool{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pool still exists after its last address was released (%v)", err)
	})
	poll.Eventually(t, 10*time.Second, func() error {
		if n := testutil.CollectAndCount(reg, "vcoil_pool_addresses_max", "vcoil_pool_addresses_allocated"); n != 0 {
			return fmt.Errorf("%d address gauges left after the pool was deleted", n)
		}
		return nil
	})
}

func TestLoadBalancerClassFiltering(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/29"))
	stop := startLBController(t, LoadBalancerOptions{})
	createLBService(t, ns, "other-class", withClass("example.com/lb"))
	createLBService(t, ns, "clusterip", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	createLBService(t, ns, "vcoil-class", withClass(vcoilv2.LoadBalancerClass))
	waitIngress(t, ns, "vcoil-class", "203.0.113.1")
	createLBService(t, ns, "no-class")
	waitIngress(t, ns, "no-class", "203.0.113.2")
	stillIngress(t, ns, "other-class")
	stillIngress(t, ns, "clusterip")
	stop()

	startLBController(t, LoadBalancerOptions{ClassOnly: true})
	createLBService(t, ns, "no-class-2")
	createLBService(t, ns, "vcoil-class-2", withClass(vcoilv2.LoadBalancerClass))
	waitIngress(t, ns, "vcoil-class-2", "203.0.113.3")
	stillIngress(t, ns, "no-class-2")
	stillIngress(t, ns, "other-class")
	// What a classless Service got before is not taken away.
	stillIngress(t, ns, "no-class", "203.0.113.2")
}

func TestLoadBalancerRestartKeepsAddressesAndResolvesDuplicateClaims(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, v4("203.0.113.0/29"))
	stop := startLBController(t, LoadBalancerOptions{})
	createLBService(t, ns, "z-old")
	waitIngress(t, ns, "z-old", "203.0.113.1")
	createLBService(t, ns, "y-old")
	waitIngress(t, ns, "y-old", "203.0.113.2")
	stop()

	// While no controller runs: a younger Service claims z-old's address in
	// its status (as a second writer or a restored backup would), and a
	// new one waits for an address. Their names sort first, so that a
	// controller's initial list meets them before the holders: only the
	// rebuilt allocations keep them from taking .1 and .2.
	// Creation timestamps have a resolution of seconds, and a tie goes to
	// the name sorting first: create the younger one a second later.
	old := getService(t, ns, "z-old").CreationTimestamp.Time
	poll.Eventually(t, 5*time.Second, func() error {
		if time.Now().Truncate(time.Second).After(old) {
			return nil
		}
		return fmt.Errorf("still the second z-old was created in")
	})
	young := createLBService(t, ns, "a-young")
	young.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if err := env.Client.Status().Update(context.Background(), young); err != nil {
		t.Fatal(err)
	}
	createLBService(t, ns, "a-new")

	startLBController(t, LoadBalancerOptions{})
	// a-young and a-new get the two next addresses, in whichever order
	// they are reconciled; the holders keep theirs, z-old as the older
	// claim.
	var got []string
	poll.Eventually(t, 20*time.Second, func() error {
		got = nil
		for _, name := range []string{"a-young", "a-new"} {
			ips, err := ingressOf(getService(t, ns, name))
			if err != nil {
				return err
			}
			if len(ips) != 1 || ips[0] == "203.0.113.1" {
				return fmt.Errorf("service %s has %v, want one new address", name, ips)
			}
			got = append(got, ips[0])
		}
		return nil
	})
	slices.Sort(got)
	if !slices.Equal(got, []string{"203.0.113.3", "203.0.113.4"}) {
		t.Errorf("a-young and a-new got %v, want 203.0.113.3 and 203.0.113.4", got)
	}
	waitEvent(t, ns, "a-young", ReasonLBAddressConflict, ns+"/z-old")
	stillIngress(t, ns, "z-old", "203.0.113.1")
	stillIngress(t, ns, "y-old", "203.0.113.2")
}

func TestLoadBalancerGivesOneAddressPerFamily(t *testing.T) {
	cleanAPIServer(t)
	ns := lbNamespace(t)
	createLBPool(t, vcoilv2.DefaultLBPool, dual("203.0.113.0/30", "fd00:1b::/126"))
	createLBPool(t, "v4-only", v4("198.51.100.0/30"))
	startLBController(t, LoadBalancerOptions{})

	// IPv6 first in spec.ipFamilies; the status lists IPv4 first.
	createLBService(t, ns, "dual", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol))
	waitIngress(t, ns, "dual", "203.0.113.1", "fd00:1b::")
	createLBService(t, ns, "v6", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol))
	waitIngress(t, ns, "v6", "fd00:1b::1")
	// Requested: one per family from the annotation.
	createLBService(t, ns, "requested", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol),
		withAnnotation(vcoilv2.AnnotationLBIPs, "fd00:1b::3,203.0.113.2"))
	waitIngress(t, ns, "requested", "203.0.113.2", "fd00:1b::3")
	// A pool without IPv6: the IPv4 address is still given, with an Event
	// for IPv6.
	createLBService(t, ns, "half", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol),
		withAnnotation(vcoilv2.AnnotationLBPool, "v4-only"))
	waitIngress(t, ns, "half", "198.51.100.1")
	waitEvent(t, ns, "half", ReasonLBFamilyNotInPool, "IPv6")
	// IPv4 exhausted, IPv6 not: the Service gets its IPv6 address and an
	// Event for IPv4.
	createLBService(t, ns, "v4-full", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol))
	waitIngress(t, ns, "v4-full", "fd00:1b::2")
	waitEvent(t, ns, "v4-full", ReasonLBPoolExhausted, "IPv4")
	waitLBPoolStatus(t, vcoilv2.DefaultLBPool, 2+4, 6, metav1.ConditionFalse, vcoilv2.ReasonExhausted)
}
