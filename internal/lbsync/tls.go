package lbsync

import (
	"fmt"
	"net/netip"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/localca"
)

// UseLocalCA has listeners with tls.localCA served with certificates that ca issues. Without it
// such listeners are left out, with a warning.
func (s *Sync) UseLocalCA(ca *localca.CA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.localCA = ca
}

// listenerTLS returns the load balancer's TLS for a fleet listener: its files, or a certificate
// from the local CA for the names a client reaches the listener by.
func (s *Sync) listenerTLS(f *v1alpha1.Fleet, l v1alpha1.Listener) (*lb.TLS, error) {
	if !l.TLS.LocalCA {
		return &lb.TLS{CertFile: l.TLS.CertFile, KeyFile: l.TLS.KeyFile}, nil
	}
	s.mu.Lock()
	ca := s.localCA
	s.mu.Unlock()
	if ca == nil {
		return nil, fmt.Errorf("tls.localCA: this load balancer has no local CA")
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if a, err := netip.ParseAddr(s.bindHost); err == nil && !a.IsUnspecified() {
		hosts = append(hosts, a.String())
	}
	if f.Spec.Global != nil && f.Spec.Global.Hostname != "" {
		hosts = append(hosts, f.Spec.Global.Hostname)
	}
	certFile, keyFile, err := ca.Ensure(fmt.Sprintf("%s-%s", f.Metadata.Name, l.Name), hosts)
	if err != nil {
		return nil, err
	}
	return &lb.TLS{CertFile: certFile, KeyFile: keyFile}, nil
}
