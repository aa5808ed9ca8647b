// Package localca is herd up's own certificate authority for HTTPS listeners that ask for it
// (a Fleet listener's tls.localCA): certificates for development and tests, the way mkcert makes
// them, without a public CA. The CA lives in <data-dir>/tls (ca.crt, and ca.key mode 0600); a
// client trusts the listeners by trusting ca.crt (curl --cacert <data-dir>/tls/ca.crt).
//
// Certificates are issued once per listener and kept on disk beside the CA, so that every load
// balancer (herd up's, the regions') serves the same one and a restart issues nothing.
package localca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"herd.dev/herd/internal/agent/pki"
)

// renewBefore is how long before its end a certificate is issued again.
const renewBefore = 30 * 24 * time.Hour

// CA issues and keeps the listeners' certificates.
type CA struct {
	dir string
	ca  *pki.CA

	mu     sync.Mutex
	issued map[string]issued // by certificate name
}

type issued struct {
	hosts    []string
	notAfter time.Time
}

// Dir is the local CA's directory in a data directory.
func Dir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// CertFile is the certificate that clients trust, of the CA in dir.
func CertFile(dir string) string { return filepath.Join(dir, "ca.crt") }

// CertFile is the CA certificate that clients trust.
func (c *CA) CertFile() string { return CertFile(c.dir) }

// Open loads the CA in dir, or makes it there if there is none.
func Open(dir string) (*CA, error) {
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return nil, fmt.Errorf("local CA: %w", err)
	}
	certPath, keyPath := CertFile(dir), filepath.Join(dir, "ca.key")
	certPEM, err1 := os.ReadFile(certPath)
	keyPEM, err2 := os.ReadFile(keyPath)
	var ca *pki.CA
	switch {
	case err1 == nil && err2 == nil:
		if ca, err1 = pki.ParseCA(certPEM, keyPEM); err1 != nil {
			return nil, fmt.Errorf("local CA in %s: %w (remove ca.crt and ca.key to make a new one)", dir, err1)
		}
	case errors.Is(err1, fs.ErrNotExist) && errors.Is(err2, fs.ErrNotExist):
		if ca, err1 = pki.NewCA("herd local CA"); err1 != nil {
			return nil, err1
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return nil, err
		}
		// The key first: a CA certificate without its key would be found and fail to load.
		if err := pki.WriteFile(keyPath, key, 0o600); err != nil {
			return nil, fmt.Errorf("local CA: %w", err)
		}
		if err := pki.WriteFile(certPath, ca.CertPEM(), 0o644); err != nil {
			return nil, fmt.Errorf("local CA: %w", err)
		}
	default:
		return nil, fmt.Errorf("local CA in %s: %w", dir, errors.Join(err1, err2))
	}
	return &CA{dir: dir, ca: ca, issued: map[string]issued{}}, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)

// Ensure returns the files of the certificate called name (a file name: letters, digits, '.' and
// '-') for hosts (DNS names and IP addresses), issuing it if there is none, if it names other
// hosts, or if it ends within 30 days. It reads the disk only the first time it sees a name.
func (c *CA) Ensure(name string, hosts []string) (certFile, keyFile string, err error) {
	if !nameRE.MatchString(name) {
		return "", "", fmt.Errorf("local CA: %q is not a certificate name", name)
	}
	hosts = slices.Clone(hosts)
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	certFile = filepath.Join(c.dir, "certs", name+".crt")
	keyFile = filepath.Join(c.dir, "certs", name+".key")
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.issued[name]
	if !ok {
		got, ok = readIssued(certFile)
	}
	if ok && slices.Equal(got.hosts, hosts) && time.Until(got.notAfter) > renewBefore {
		c.issued[name] = got
		return certFile, keyFile, nil
	}
	req := pki.Request{CommonName: name, Server: true}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			req.IPs = append(req.IPs, ip)
		} else {
			req.DNSNames = append(req.DNSNames, h)
		}
	}
	kp, err := c.ca.Issue(req)
	if err != nil {
		return "", "", err
	}
	// The key first, then the certificate: a load balancer watching the files loads the new
	// pair once the certificate changes (lb reloads a changed pair).
	if err := pki.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("local CA: %w", err)
	}
	if err := pki.WriteFile(certFile, kp.CertPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("local CA: %w", err)
	}
	got, _ = readIssued(certFile)
	c.issued[name] = got
	return certFile, keyFile, nil
}

// readIssued reads the hosts and end of the certificate in path.
func readIssued(path string) (issued, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return issued{}, false
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return issued{}, false
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return issued{}, false
	}
	hosts := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	slices.Sort(hosts)
	return issued{hosts: hosts, notAfter: cert.NotAfter}, true
}
