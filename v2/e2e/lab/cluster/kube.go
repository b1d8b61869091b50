package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/config"
	"github.com/vcoil/vcoil/v2/e2e/lab/netnsdial"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

// pollInterval is the pause between two looks at the lab while a step waits
// for it.
const pollInterval = 500 * time.Millisecond

// Client is a Kubernetes client of the lab's admin, usable from the root
// network namespace.
func (c Config) Client() (client.Client, *rest.Config, error) {
	cfg, err := netnsdial.RESTConfig(c.AdminKubeconfig())
	if err != nil {
		return nil, nil, err
	}
	cfg.Timeout = 20 * time.Second
	scheme, err := kubescheme.New(apiextensionsv1.AddToScheme)
	if err != nil {
		return nil, nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	return cl, cfg, err
}

// httpInCP is an HTTP client whose connections start in the control
// plane's network namespace (etcd's health endpoint).
func httpInCP() *http.Client {
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: netnsdial.Dialer(netnsdial.ControlPlaneNetns)}}
}

func waitEtcd(ctx context.Context) error {
	if err := poll.Until(ctx, time.Minute, pollInterval, func(context.Context) error {
		resp, err := httpInCP().Get("http://127.0.0.1:2379/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"true"`) {
			return fmt.Errorf("etcd says %s", b)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("etcd healthy: %w", err)
	}
	return nil
}

func waitAPIServer(ctx context.Context, cfg *rest.Config) error {
	rc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	if err := poll.Until(ctx, 2*time.Minute, pollInterval, func(context.Context) error {
		resp, err := rc.Get(cfg.Host + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("/readyz: %s %s", resp.Status, b)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("kube-apiserver ready: %w", err)
	}
	return nil
}

// decodeYAML splits a multi-document YAML into objects.
func decodeYAML(doc string) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, &unstructured.Unstructured{Object: obj})
		}
	}
}

// apply creates or updates objects with server-side apply.
func apply(ctx context.Context, cl client.Client, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("vcoil-lab"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// installVcoil applies vcoil's overlay, with vcoild's service renderer
// off when kube-proxy serves the lab: CRDs first, established before the
// rest.
func (c Config) installVcoil(ctx context.Context, cl client.Client) error {
	objs, err := config.Build(c.Overlay)
	if err != nil {
		return err
	}
	if err := c.withServiceProxyArgs(objs); err != nil {
		return err
	}
	if err := c.withVPPServiceArgs(objs); err != nil {
		return err
	}
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	if err := apply(ctx, cl, crds); err != nil {
		return err
	}
	for _, o := range crds {
		name := o.GetName()
		if err := poll.Until(ctx, time.Minute, pollInterval, func(ctx context.Context) error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := cl.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("not established")
		}); err != nil {
			return fmt.Errorf("CRD %s established: %w", name, err)
		}
	}
	return apply(ctx, cl, rest)
}

// createDefaultPools makes the default AddressPool of the pods and the
// default LoadBalancer pool once vcoil-controller's webhook answers; in a
// dual-stack lab both have a subnet of each family, so that every pod gets
// an address of each and LoadBalancer Services one per ClusterIP family.
func createDefaultPools(ctx context.Context, cl client.Client, topo topology.Topology) error {
	pods := vcoilv2.SubnetSet{IPv4: ptr.To(topology.PodPool.String())}
	lb := vcoilv2.SubnetSet{IPv4: ptr.To(topology.LBPool.String())}
	if topo.Dual() {
		pods.IPv6 = ptr.To(topology.PodPool6.String())
		lb.IPv6 = ptr.To(topology.LBPool6.String())
	}
	pools := []*vcoilv2.AddressPool{{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: vcoilv2.AddressPoolSpec{
			BlockSizeBits: topology.BlockSizeBits,
			Subnets:       []vcoilv2.SubnetSet{pods},
		},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: vcoilv2.DefaultLBPool},
		Spec: vcoilv2.AddressPoolSpec{
			Usage:   vcoilv2.UsageLoadBalancer,
			Subnets: []vcoilv2.SubnetSet{lb},
		},
	}}
	for _, pool := range pools {
		if err := poll.Until(ctx, 3*time.Minute, pollInterval, func(ctx context.Context) error {
			err := cl.Create(ctx, pool.DeepCopy())
			if err == nil || strings.Contains(err.Error(), "already exists") {
				return nil
			}
			return err
		}); err != nil {
			return fmt.Errorf("AddressPool %s created (vcoil-controller's webhook answering): %w", pool.Name, err)
		}
	}
	return nil
}

func waitNodesReady(ctx context.Context, cl client.Client, want int, timeout time.Duration) error {
	if err := poll.Until(ctx, timeout, pollInterval, func(ctx context.Context) error {
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes); err != nil {
			return err
		}
		var notReady []string
		ready := 0
		for _, n := range nodes.Items {
			ok := false
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ok = true
				}
			}
			if ok {
				ready++
			} else {
				notReady = append(notReady, n.Name)
			}
		}
		if ready < want {
			return fmt.Errorf("%d of %d registered nodes ready (not ready: %v)", ready, len(nodes.Items), notReady)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%d nodes Ready: %w", want, err)
	}
	return nil
}

func waitNodesRegistered(ctx context.Context, cl client.Client, want int) error {
	if err := poll.Until(ctx, 2*time.Minute, pollInterval, func(ctx context.Context) error {
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes); err != nil {
			return err
		}
		if len(nodes.Items) < want {
			return fmt.Errorf("%d registered", len(nodes.Items))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("%d nodes registered: %w", want, err)
	}
	return nil
}

func waitDeployment(ctx context.Context, cl client.Client, ns, name string, timeout time.Duration) error {
	if err := poll.Until(ctx, timeout, pollInterval, func(ctx context.Context) error {
		d := &appsv1.Deployment{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
			return fmt.Errorf("%d of %d replicas available", d.Status.AvailableReplicas, want)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("deployment %s/%s available: %w", ns, name, err)
	}
	return nil
}

func waitDaemonSet(ctx context.Context, cl client.Client, ns, name string, want int32, timeout time.Duration) error {
	if err := poll.Until(ctx, timeout, pollInterval, func(ctx context.Context) error {
		d := &appsv1.DaemonSet{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		if d.Status.NumberReady < want {
			return fmt.Errorf("%d of %d ready", d.Status.NumberReady, want)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("daemonset %s/%s ready on every node: %w", ns, name, err)
	}
	return nil
}
