package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/webhookcert"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// instance is one vcoil-controller process.
type instance struct {
	name              string
	cmd               *exec.Cmd
	healthURL, metURL string
	webhookPort       int
	log               *testenv.LogBuffer
	exited            chan struct{}
}

func start(t *testing.T, bin, kubeconfig, name string) *instance {
	t.Helper()
	health, metrics, webhook := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	in := &instance{
		name:        name,
		healthURL:   fmt.Sprintf("http://127.0.0.1:%d", health),
		metURL:      fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
		log:         &testenv.LogBuffer{},
		exited:      make(chan struct{}),
		webhookPort: webhook,
	}
	in.cmd = exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--leader-elect",
		"--namespace", "kube-system",
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", health),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metrics),
		"--webhook-port", fmt.Sprint(webhook),
		"--cert-dir", t.TempDir(),
		"--gc-interval", "1h",
	)
	in.cmd.Stdout, in.cmd.Stderr = in.log, in.log
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = in.cmd.Wait(); close(in.exited) }()
	t.Cleanup(func() {
		_ = in.cmd.Process.Kill()
		<-in.exited
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, in.log.String())
		}
	})
	return in
}

// applyRendered creates the objects of the default overlay that a cluster
// needs for vcoil-controller to run: its RBAC and webhook configurations.
func applyRendered(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := testenv.ApplyRBAC(ctx, env.Client, "default"); err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.Render("default")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "MutatingWebhookConfiguration" && o.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		// The apiserver of envtest cannot reach a Service: let AddressPool
		// writes pass when the call fails. This test is about the program's
		// wiring; the webhooks are tested in v2/controllers.
		hooks, _ := o.Object["webhooks"].([]any)
		for _, h := range hooks {
			h.(map[string]any)["failurePolicy"] = "Ignore"
			h.(map[string]any)["timeoutSeconds"] = int64(1)
		}
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { deleteObject(t, o) })
	}
}

// deleteObject removes what a test created in the shared apiserver, so that
// the next test (or a run with -count) starts from the same state.
func deleteObject(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete %T %s: %v", o, o.GetName(), err)
	}
}

func leaseHolder(t *testing.T) string {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: constants.ControllerLeaderElectionID}, l); err != nil {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// TestTwoReplicasWithTheirRBACElectALeaderAndFailOver runs the real program
// twice, authenticated as its ServiceAccount with exactly the RBAC of the
// default overlay: the replicas issue one shared webhook certificate, one of
// them leads and answers requests, and when it stops the other takes over
// and makes an Egress's routers.
func TestTwoReplicasWithTheirRBACElectALeaderAndFailOver(t *testing.T) {
	ctx := context.Background()
	bin := gobuild.Program(t, "github.com/vcoil/vcoil/v2/cmd/vcoil-controller")
	applyRendered(t)
	kc, err := env.UserKubeConfig("system:serviceaccount:kube-system:vcoil-controller", "system:serviceaccounts")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}

	// What the replicas leave behind: the leader's Lease and the shared
	// webhook certificate. Registered first, so that it runs after the
	// replicas are killed.
	t.Cleanup(func() {
		deleteObject(t, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: constants.ControllerLeaderElectionID}})
		deleteObject(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: constants.WebhookCertSecret}})
	})
	a := start(t, bin, kubeconfig, "a")
	b := start(t, bin, kubeconfig, "b")
	for _, in := range []*instance{a, b} {
		poll.Eventually(t, 30*time.Second, func() error {
			if code, body := testenv.HTTPGet(in.healthURL + "/readyz"); code != http.StatusOK {
				return fmt.Errorf("%s /readyz: %d %s", in.name, code, body)
			}
			if code, body := testenv.HTTPGet(in.healthURL + "/healthz"); code != http.StatusOK {
				return fmt.Errorf("%s /healthz: %d %s", in.name, code, body)
			}
			return nil
		})
	}

	// One certificate for both, its CA injected.
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: constants.WebhookCertSecret}, secret); err != nil {
		t.Fatalf("webhook certificate secret: %v", err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: constants.ValidatingWebhookConfig}, vwc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(vwc.Webhooks[0].ClientConfig.CABundle, secret.Data[webhookcert.KeyCA]) {
		t.Fatal("the validating webhook does not carry the issued CA")
	}
	for _, in := range []*instance{a, b} {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", in.webhookPort), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("%s webhook server: %v", in.name, err)
		}
		served := conn.ConnectionState().PeerCertificates[0].Raw
		conn.Close()
		issued, _ := pemCert(secret.Data[webhookcert.KeyCert])
		if !bytes.Equal(served, issued) {
			t.Fatalf("%s serves another certificate than the shared one", in.name)
		}
	}

	// One leader.
	var leader, standby *instance
	poll.Eventually(t, 30*time.Second, func() error {
		aLeads := strings.Contains(a.log.String(), "Successfully acquired lease")
		bLeads := strings.Contains(b.log.String(), "Successfully acquired lease")
		switch {
		case aLeads && !bLeads:
			leader, standby = a, b
		case bLeads && !aLeads:
			leader, standby = b, a
		default:
			return fmt.Errorf("leaders: a=%v b=%v, holder %q", aLeads, bLeads, leaseHolder(t))
		}
		return nil
	})

	env.CreateNode(t, "node-1", "")
	// Registered after the replicas started, so it runs while the standby
	// still leads: the node's deletion releases its blocks and requests,
	// then the pool's finalizer lets it go.
	t.Cleanup(func() {
		deleteObject(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
		deleteObject(t, &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
		poll.Eventually(t, 30*time.Second, func() error {
			err := env.Client.Get(ctx, client.ObjectKey{Name: "default"}, &vcoilv2.AddressPool{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("pool default is still there (%v)", err)
			}
			return nil
		})
	})
	pool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.100.0.0/24")}}},
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	requestBlock := func(want string) {
		t.Helper()
		br := &vcoilv2.BlockRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "node-1-"},
			Spec:       vcoilv2.BlockRequestSpec{NodeName: "node-1", PoolName: "default"},
		}
		if err := env.Client.Create(ctx, br); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 30*time.Second, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(br), br); err != nil {
				return err
			}
			if !br.Completed() || br.Status.AddressBlockName != want {
				return fmt.Errorf("request status %+v, want %s", br.Status, want)
			}
			return nil
		})
	}
	requestBlock("default-0")
	poll.Eventually(t, 10*time.Second, func() error {
		code, body := testenv.HTTPGet(leader.metURL)
		if code != http.StatusOK || !strings.Contains(body, `vcoil_pool_blocks_allocated{pool="default"} 1`) ||
			!strings.Contains(body, `vcoil_pool_blocks_max{pool="default"} 8`) {
			return fmt.Errorf("leader metrics (%d) lack the pool gauges", code)
		}
		return nil
	})

	// The leader stops; the standby takes over at once (the lease is
	// released on shutdown) and answers the next request.
	stopped := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-leader.exited
	requestBlock("default-1")
	if !strings.Contains(standby.log.String(), "Successfully acquired lease") {
		t.Fatal("the standby answered without leading")
	}

	// An Egress gets its routers, with exactly the rendered rights: the
	// binding of the routers' role works through bind, without the role's
	// own rights (pods).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "egress-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	eg := &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "nat"},
		Spec:       vcoilv2.EgressSpec{Destinations: []string{"203.0.113.0/24"}, PodDisruptionBudget: &vcoilv2.EgressPDBSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
	}
	if err := env.Client.Create(ctx, eg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteObject(t, eg)
		deleteObject(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: constants.EgressClusterRoleBinding}})
	})
	poll.Eventually(t, 30*time.Second, func() error {
		key := client.ObjectKeyFromObject(eg)
		dep := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, key, dep); err != nil {
			return err
		}
		if img := dep.Spec.Template.Spec.Containers[0].Image; img != constants.EgressImage {
			return fmt.Errorf("router image %s, want the default %s", img, constants.EgressImage)
		}
		for _, o := range []client.Object{&corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
			if err := env.Client.Get(ctx, key, o); err != nil {
				return err
			}
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: constants.EgressServiceAccount}, &corev1.ServiceAccount{}); err != nil {
			return err
		}
		crb := &rbacv1.ClusterRoleBinding{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: constants.EgressClusterRoleBinding}, crb); err != nil {
			return err
		}
		if len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != ns.Name || crb.RoleRef.Name != constants.EgressClusterRole {
			return fmt.Errorf("binding %+v", crb)
		}
		got := &vcoilv2.Egress{}
		if err := env.Client.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("egress status %+v", got.Status)
		}
		return nil
	})
	for _, in := range []*instance{a, b} {
		if log := in.log.String(); strings.Contains(log, "forbidden") {
			t.Errorf("%s was refused by RBAC:\n%s", in.name, log)
		}
	}
	t.Logf("failover: the standby answered a request %s after the leader got SIGTERM", time.Since(stopped).Round(10*time.Millisecond))
}

func pemCert(data []byte) ([]byte, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return block.Bytes, nil
}
