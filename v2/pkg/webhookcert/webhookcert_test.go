package webhookcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

func webhookConfigs(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	side := admissionregistrationv1.SideEffectClassNone
	clientConfig := admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "kube-system", Name: "svc", Path: ptr.To("/x")},
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "a.vcoil.io", ClientConfig: clientConfig, SideEffects: &side, AdmissionReviewVersions: []string{"v1"}},
		},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "v"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a.vcoil.io", ClientConfig: clientConfig, SideEffects: &side, AdmissionReviewVersions: []string{"v1"}},
			{Name: "b.vcoil.io", ClientConfig: clientConfig, SideEffects: &side, AdmissionReviewVersions: []string{"v1"}},
		},
	}
	for _, o := range []client.Object{m, v} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, o) })
	}
}

func issuer(dir string) *Issuer {
	return &Issuer{
		Client:                          env.Client,
		Namespace:                       "kube-system",
		SecretName:                      "cert",
		ServiceName:                     "svc",
		CertDir:                         dir,
		MutatingWebhookConfigurations:   []string{"m"},
		ValidatingWebhookConfigurations: []string{"v"},
	}
}

func TestReplicasShareOneCertificateAndInjectItsCA(t *testing.T) {
	webhookConfigs(t)
	ctx := context.Background()
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cert"}})
	})

	dirA, dirB := t.TempDir(), t.TempDir()
	if err := issuer(dirA).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := issuer(dirB).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	certA, _ := os.ReadFile(filepath.Join(dirA, KeyCert))
	certB, _ := os.ReadFile(filepath.Join(dirB, KeyCert))
	if len(certA) == 0 || string(certA) != string(certB) {
		t.Fatal("the second replica did not reuse the first one's certificate")
	}

	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cert"}, secret); err != nil {
		t.Fatal(err)
	}
	// The served certificate verifies against the injected CA for the
	// Service's DNS name.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dirA, KeyCert), filepath.Join(dirA, KeyKey))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "v"}, v); err != nil {
		t.Fatal(err)
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "m"}, m); err != nil {
		t.Fatal(err)
	}
	bundles := [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[1].ClientConfig.CABundle}
	for i, b := range bundles {
		if string(b) != string(secret.Data[KeyCA]) {
			t.Fatalf("webhook %d has CA bundle %q, want the Secret's CA", i, b)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(b)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "svc.kube-system.svc"}); err != nil {
			t.Fatalf("served certificate does not verify with webhook %d's CA: %v", i, err)
		}
	}
}

func TestCertificateNearExpiryIsRenewedAtStart(t *testing.T) {
	webhookConfigs(t)
	ctx := context.Background()
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cert"}})
	})

	old := issuer(t.TempDir())
	old.Now = func() time.Time { return time.Now().Add(-Validity + RenewBefore/2) }
	if err := old.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cert"}, first); err != nil {
		t.Fatal(err)
	}
	if err := issuer(t.TempDir()).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	second := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cert"}, second); err != nil {
		t.Fatal(err)
	}
	if string(first.Data[KeyCert]) == string(second.Data[KeyCert]) {
		t.Fatal("a certificate that expires within RenewBefore was kept")
	}
	if why := issuer("").unusable(second.Data); why != "" {
		t.Fatalf("renewed certificate is unusable: %s", why)
	}
}
