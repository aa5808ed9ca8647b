package pki

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestIssueServerCertVerifies(t *testing.T) {
	ca, err := NewCA("herd-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Request{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"kubernetes", "kubernetes.default.svc"},
		IPs:        []net.IP{net.ParseIP("10.219.0.10"), net.ParseIP("10.215.0.1")},
		Server:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The pair loads as a TLS certificate (the key matches the certificate).
	if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		t.Fatalf("X509KeyPair: %v", err)
	}
	cert := parseCert(t, kp.CertPEM)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CA PEM does not parse")
	}
	for _, name := range []string{"10.219.0.10", "10.215.0.1", "kubernetes.default.svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.0.1"}); err == nil {
		t.Error("certificate verified for an address it does not name")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("a server certificate verified for client auth")
	}
}

func TestIssueClientCertCarriesUserAndGroups(t *testing.T) {
	ca, err := NewCA("herd-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, kp.CertPEM)
	if cert.Subject.CommonName != "kube-apiserver-kubelet-client" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("subject = %v", cert.Subject)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify client: %v", err)
	}
	if !ca.Cert.IsCA {
		t.Error("CA certificate is not a CA")
	}
}

func TestIssueNeedsAUsage(t *testing.T) {
	ca, err := NewCA("herd-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(Request{CommonName: "x"}); err == nil {
		t.Fatal("Issue without server or client usage succeeded")
	}
}

func TestSigningKeyPairMatches(t *testing.T) {
	priv, pub, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(priv)
	if pb == nil || pb.Type != "PRIVATE KEY" {
		t.Fatalf("private key PEM = %q", priv)
	}
	key, err := x509.ParsePKCS8PrivateKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ub, _ := pem.Decode(pub)
	if ub == nil || ub.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM = %q", pub)
	}
	pubKey, err := x509.ParsePKIXPublicKey(ub.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	type equaler interface{ Equal(x crypto.PublicKey) bool }
	if !pubKey.(equaler).Equal(key.(crypto.Signer).Public()) {
		t.Error("public key does not match the private key")
	}
}

func TestWriteFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sa.key")
	if err := WriteFile(path, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("secret2"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if string(data) != "secret2" {
		t.Errorf("content = %q", data)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestRandomToken(t *testing.T) {
	a, err := RandomToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RandomToken()
	if len(a) != 64 || a == b {
		t.Errorf("tokens %q %q", a, b)
	}
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
