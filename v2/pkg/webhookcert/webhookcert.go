// Package webhookcert gives vcoil-controller's webhook server a serving
// certificate without cert-manager: a CA and a serving certificate live in one
// Secret shared by every replica (the first replica to start creates it,
// creation conflicts decide), each replica writes them to its certificate
// directory, and the CA is injected into the webhook configurations. It does
// not rotate certificates while running: a replica that starts within
// RenewBefore of expiry issues new ones.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/vcoil/vcoil/v2/pkg/atomicfile"
)

// Keys of the Secret.
const (
	KeyCA   = "ca.crt"
	KeyCert = corev1.TLSCertKey
	KeyKey  = corev1.TLSPrivateKeyKey
)

const (
	// Validity of issued certificates.
	Validity = 10 * 365 * 24 * time.Hour
	// RenewBefore is how close to expiry a certificate is replaced at start.
	RenewBefore = 90 * 24 * time.Hour
)

// Issuer ensures the webhook certificate.
type Issuer struct {
	// Client must read from the apiserver (not a cache that is not started).
	Client      client.Client
	Namespace   string
	SecretName  string
	ServiceName string
	CertDir     string
	// Webhook configurations whose webhooks get the CA bundle.
	MutatingWebhookConfigurations   []string
	ValidatingWebhookConfigurations []string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Ensure makes the Secret hold a valid certificate for the Service, writes it
// to CertDir and injects the CA into the webhook configurations.
func (is *Issuer) Ensure(ctx context.Context) error {
	secret, err := is.secret(ctx)
	if err != nil {
		return err
	}
	if err := writeFiles(is.CertDir, secret.Data[KeyCert], secret.Data[KeyKey]); err != nil {
		return fmt.Errorf("write webhook certificate to %s: %w", is.CertDir, err)
	}
	return is.inject(ctx, secret.Data[KeyCA])
}

func (is *Issuer) now() time.Time {
	if is.Now != nil {
		return is.Now()
	}
	return time.Now()
}

func (is *Issuer) dnsNames() []string {
	return []string{
		fmt.Sprintf("%s.%s.svc", is.ServiceName, is.Namespace),
		fmt.Sprintf("%s.%s.svc.cluster.local", is.ServiceName, is.Namespace),
	}
}

// secret returns a Secret with a usable certificate, creating or renewing it.
func (is *Issuer) secret(ctx context.Context) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: is.Namespace, Name: is.SecretName}
	for attempt := 0; attempt < 5; attempt++ {
		s := &corev1.Secret{}
		err := is.Client.Get(ctx, key, s)
		switch {
		case apierrors.IsNotFound(err):
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: is.Namespace, Name: is.SecretName}, Type: corev1.SecretTypeTLS}
			if s.Data, err = is.issue(); err != nil {
				return nil, err
			}
			err = is.Client.Create(ctx, s)
			if apierrors.IsAlreadyExists(err) {
				continue // another replica was first: use its certificate
			}
			if err != nil {
				return nil, fmt.Errorf("create secret %s: %w", key, err)
			}
			log.FromContext(ctx).Info("issued webhook certificate", "secret", key.String(), "dnsNames", is.dnsNames())
			return s, nil
		case err != nil:
			return nil, fmt.Errorf("get secret %s: %w", key, err)
		}
		if why := is.unusable(s.Data); why == "" {
			return s, nil
		} else {
			log.FromContext(ctx).Info("renewing webhook certificate", "secret", key.String(), "reason", why)
		}
		if s.Data, err = is.issue(); err != nil {
			return nil, err
		}
		err = is.Client.Update(ctx, s)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update secret %s: %w", key, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("secret %s keeps changing under us", key)
}

// unusable says why the Secret's data cannot serve, or "" when it can.
func (is *Issuer) unusable(data map[string][]byte) string {
	ca, err := parseCert(data[KeyCA])
	if err != nil {
		return "CA: " + err.Error()
	}
	cert, err := parseCert(data[KeyCert])
	if err != nil {
		return "certificate: " + err.Error()
	}
	if _, err := parseKey(data[KeyKey]); err != nil {
		return "key: " + err.Error()
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range is.dnsNames() {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: is.now()}); err != nil {
			return err.Error()
		}
	}
	if is.now().Add(RenewBefore).After(cert.NotAfter) || is.now().Add(RenewBefore).After(ca.NotAfter) {
		return "expires at " + cert.NotAfter.String()
	}
	return ""
}

// issue creates a CA and a serving certificate for the Service.
func (is *Issuer) issue() (map[string][]byte, error) {
	now := is.now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "vcoil-webhook-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: is.dnsNames()[0]},
		DNSNames:     is.dnsNames(),
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		KeyCA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		KeyCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyKey:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// inject writes the CA into every webhook of the named configurations.
func (is *Issuer) inject(ctx context.Context, ca []byte) error {
	for _, name := range is.MutatingWebhookConfigurations {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		err := is.setCABundles(ctx, name, cfg, ca, func() (b []*[]byte) {
			for i := range cfg.Webhooks {
				b = append(b, &cfg.Webhooks[i].ClientConfig.CABundle)
			}
			return b
		})
		if err != nil {
			return fmt.Errorf("inject CA into mutating webhook configuration %q: %w", name, err)
		}
	}
	for _, name := range is.ValidatingWebhookConfigurations {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		err := is.setCABundles(ctx, name, cfg, ca, func() (b []*[]byte) {
			for i := range cfg.Webhooks {
				b = append(b, &cfg.Webhooks[i].ClientConfig.CABundle)
			}
			return b
		})
		if err != nil {
			return fmt.Errorf("inject CA into validating webhook configuration %q: %w", name, err)
		}
	}
	return nil
}

// setCABundles reads the configuration into obj and patches the CA bundles
// that bundles points at, when any differs.
func (is *Issuer) setCABundles(ctx context.Context, name string, obj client.Object, ca []byte, bundles func() []*[]byte) error {
	if err := is.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		return err
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	changed := false
	for _, b := range bundles() {
		if !bytes.Equal(*b, ca) {
			*b, changed = ca, true
		}
	}
	if !changed {
		return nil
	}
	return is.Client.Patch(ctx, obj, patch)
}

func writeFiles(dir string, cert, key []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Each file is replaced whole, so that the webhook server's certificate
	// watcher never reads half a file.
	for name, data := range map[string][]byte{KeyCert: cert, KeyKey: key} {
		if err := atomicfile.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(data []byte) (any, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	if b.Type == "EC PRIVATE KEY" {
		return x509.ParseECPrivateKey(b.Bytes)
	}
	return x509.ParsePKCS8PrivateKey(b.Bytes)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
