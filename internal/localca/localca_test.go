package localca

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// verify checks that the certificate in certFile is the CA's, for host.
func verify(t *testing.T, ca *CA, certFile, keyFile, host string) error {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("the issued pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
	return err
}

func TestLocalCAIssuesOnceAndKeepsItsKeysPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.key"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v, want 0600", f, err, st.Mode().Perm())
		}
	}
	hosts := []string{"localhost", "127.0.0.1", "hello.herd.test", "localhost"}
	certFile, keyFile, err := ca.Ensure("web-https", hosts)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", keyFile, st.Mode().Perm())
	}
	for _, h := range []string{"localhost", "127.0.0.1", "hello.herd.test"} {
		if err := verify(t, ca, certFile, keyFile, h); err != nil {
			t.Errorf("certificate for %s: %v", h, err)
		}
	}
	if err := verify(t, ca, certFile, keyFile, "other.example"); err == nil {
		t.Error("the certificate verifies for a host it was not issued for")
	}
	before, _ := os.ReadFile(certFile)

	// Another herd up on the same data directory: same CA, same certificate, nothing issued.
	again, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := again.Ensure("web-https", []string{"127.0.0.1", "hello.herd.test", "localhost"}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(certFile); string(after) != string(before) {
		t.Error("the same hosts issued a new certificate")
	}
	if err := verify(t, again, certFile, keyFile, "localhost"); err != nil {
		t.Errorf("after reopening, the CA no longer verifies its certificate: %v", err)
	}

	// Other hosts: a new certificate for them.
	if _, _, err := again.Ensure("web-https", []string{"localhost", "shop.herd.test"}); err != nil {
		t.Fatal(err)
	}
	if err := verify(t, again, certFile, keyFile, "shop.herd.test"); err != nil {
		t.Errorf("after a change of hosts: %v", err)
	}
	if _, _, err := again.Ensure("../escape", hosts); err == nil {
		t.Error("a certificate name with a path was accepted")
	}
}

func TestLocalCABrokenIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil {
		t.Fatal("a broken CA opened")
	}
}
