package lb

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// servedSerial returns the serial number of the certificate a TLS listener presents.
func servedSerial(t *testing.T, addr net.Addr) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr.String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, certFile[:len(certFile)-len("cert.pem")]+"key.pem")
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x.SerialNumber.String()
}

// copyFile replaces dst with src's content the way a renewal does: write beside, rename over.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// A renewed certificate is served without an Apply; a renewal whose pair does not load leaves
// the working certificate in place.
func TestCertificateReloadedOnChange(t *testing.T) {
	certFile, keyFile, _ := writeCert(t)
	b := newBackend(t, "b", nil)
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
	l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
	var logs logBuffer
	lb := startLBWith(t, EngineFast, Config{Listeners: []Listener{l}}, slogTo(&logs))
	addr := lb.Addr("web/http")
	first := serialOf(t, certFile)
	if got := servedSerial(t, addr); got != first {
		t.Fatalf("serves certificate %s, want %s", got, first)
	}

	// A half-written renewal: a new certificate beside the old key. The old pair keeps serving.
	renewedCert, renewedKey, _ := writeCertSerial(t, 2)
	copyFile(t, renewedCert, certFile)
	waitFor(t, 10*time.Second, "the broken renewal noticed", func() bool {
		return strings.Contains(logs.String(), "changed certificate does not load")
	})
	if got := servedSerial(t, addr); got != first {
		t.Fatalf("after a broken renewal serves %s, want the working %s", got, first)
	}
	// The key follows: the renewed pair is served.
	copyFile(t, renewedKey, keyFile)
	want := serialOf(t, renewedCert)
	waitFor(t, 10*time.Second, "the renewed certificate served", func() bool { return servedSerial(t, addr) == want })
	if !strings.Contains(logs.String(), "certificate reloaded") {
		t.Errorf("no \"certificate reloaded\" log line:\n%s", logs.String())
	}
}

// A renewal that lands between the Apply that loaded a pair and the reloader's first look is
// served too: the stamp the reloader compares with is the one of the loaded pair.
func TestCertificateRenewedRightAfterApply(t *testing.T) {
	certFile, keyFile, _ := writeCert(t)
	b := newBackend(t, "b", nil)
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
	l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
	lb := startLB(t, EngineFast, Config{Listeners: []Listener{l}})
	renewedCert, renewedKey, _ := writeCertSerial(t, 3)
	copyFile(t, renewedKey, keyFile)
	copyFile(t, renewedCert, certFile)
	want := serialOf(t, renewedCert)
	waitFor(t, 10*time.Second, "the renewed certificate served", func() bool { return servedSerial(t, lb.Addr("web/http")) == want })
}
