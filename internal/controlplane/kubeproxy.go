// The TLS listener of the Kubernetes proxy route: kubectl sends a kubeconfig's token only over
// TLS, so the kubeconfigs herd issues point at this listener rather than at the API's plain one.

package controlplane

import (
	"crypto/tls"
	"fmt"
	"net"

	"herd.dev/herd/internal/agent/pki"
	"herd.dev/herd/internal/apiserver"
)

// listenKubeProxy listens with TLS on host (any port) for the API's Kubernetes proxy route, with a
// CA and serving certificate made now and kept in memory only: the kube tokens die with this
// process, and so may the CA that the kubeconfigs holding them trust.
func listenKubeProxy(host string) (net.Listener, *apiserver.KubeProxy, error) {
	ca, err := pki.NewCA("herd-kube-proxy-ca")
	if err != nil {
		return nil, nil, err
	}
	req := pki.Request{CommonName: "herd-kube-proxy", Server: true, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	if ip := net.ParseIP(host); ip != nil {
		req.IPs = append(req.IPs, ip)
	} else if host != "" {
		req.DNSNames = append(req.DNSNames, host)
	}
	kp, err := ca.Issue(req)
	if err != nil {
		return nil, nil, err
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, nil, err
	}
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, nil, fmt.Errorf("kube proxy listener: %w", err)
	}
	return ln, &apiserver.KubeProxy{URL: "https://" + ln.Addr().String(), CAPEM: ca.CertPEM()}, nil
}
