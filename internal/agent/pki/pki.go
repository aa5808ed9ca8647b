// Package pki makes the keys and certificates of a one-node cluster: a CA, certificates it
// signs for servers and clients, and bare key pairs (the service-account signing key). Keys are
// ECDSA P-256: every Kubernetes component accepts them, and making one takes microseconds where
// an RSA key takes a good part of a second on a busy machine, which would show in the boot time.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity is how long the certificates this package makes are valid. Instances are cattle:
// they are replaced long before this.
const Validity = 10 * 365 * 24 * time.Hour

// CA is a certificate authority that signs certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// ParseCA reads a CA from its PEM certificate and PEM private key (as CertPEM and KeyPEM write
// them).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("pki: CA: not a PEM certificate and key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("pki: CA: the certificate is no CA or the key cannot sign")
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// CertPEM returns the CA's certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Request is what a certificate says about its holder.
type Request struct {
	// CommonName is the subject's CN (for client certificates, the user name).
	CommonName string
	// Organization is the subject's O (for client certificates, the groups).
	Organization []string
	// DNSNames and IPs are the subject alternative names of a serving certificate.
	DNSNames []string
	IPs      []net.IP
	// Server and Client choose the extended key usages; at least one must be set.
	Server, Client bool
}

// KeyPair is a PEM-encoded certificate and its PEM-encoded private key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Issue makes a new key and a certificate for it signed by the CA.
func (ca *CA) Issue(r Request) (KeyPair, error) {
	if !r.Server && !r.Client {
		return KeyPair{}, errors.New("pki: a certificate must be for a server, a client, or both")
	}
	key, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.CommonName, Organization: r.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     r.DNSNames,
		IPAddresses:  r.IPs,
	}
	if r.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if r.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("pki: certificate for %s: %w", r.CommonName, err)
	}
	keyPEM, err := PrivateKeyPEM(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  keyPEM,
	}, nil
}

// NewSigningKey makes a bare key pair (e.g. the service-account token signing key) and returns
// the private key and the public key, both PEM-encoded.
func NewSigningKey() (privPEM, pubPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	privPEM, err = PrivateKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("pki: public key: %w", err)
	}
	return privPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// PrivateKeyPEM encodes a private key as PKCS #8 PEM ("PRIVATE KEY").
func PrivateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// KeyPEM returns the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) { return PrivateKeyPEM(ca.Key) }

// WriteFile writes data to path with mode perm, replacing any file there through a temporary
// file and a rename, so that a reader never sees half a key.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// RandomToken returns a bearer token: 32 random bytes, hex-encoded.
func RandomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pki: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	return key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil || n.Sign() == 0 {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
