package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"slices"
	"testing"
)

func parse(t *testing.T, p Pair) *x509.Certificate {
	t.Helper()
	if _, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	b, _ := pem.Decode(p.CertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestServingCertificateVerifiesForItsNamesAndAddresses(t *testing.T) {
	ca, err := NewCA("vcoil-lab-ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(Request{
		CommonName: "kube-apiserver", Server: true,
		DNSNames: []string{"kubernetes.default.svc"},
		IPs:      []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.16.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cert := parse(t, p)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	for _, name := range []string{"198.18.0.2", "198.18.16.1", "kubernetes.default.svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "198.18.0.3", Roots: roots}); err == nil {
		t.Error("the certificate verifies for an address it does not name")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a serving certificate verifies as a client certificate")
	}
}

func TestNodeClientCertificateCarriesTheNodeAuthorizersIdentity(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(Request{CommonName: "system:node:node1", Organizations: []string{"system:nodes"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert := parse(t, p)
	if cert.Subject.CommonName != "system:node:node1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", cert.Subject)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	other, _ := NewCA("other")
	others := x509.NewCertPool()
	others.AppendCertsFromPEM(other.CertPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: others, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the certificate verifies against another CA")
	}
}

func TestIssueRefusesIncompleteRequests(t *testing.T) {
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(Request{Server: true}); err == nil {
		t.Error("a request without a common name was issued")
	}
	if _, err := ca.Issue(Request{CommonName: "x"}); err == nil {
		t.Error("a request without a usage was issued")
	}
}

func TestServiceAccountKeyPairMatches(t *testing.T) {
	priv, pub, err := NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(priv)
	key, err := x509.ParseECPrivateKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := pem.Decode(pub)
	pk, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !key.PublicKey.Equal(pk) {
		t.Error("public key does not belong to the private key")
	}
}
