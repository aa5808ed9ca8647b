// The instance's credentials: its CA, the certificates of the API server, the kubelet and the
// aggregation layer's front proxy, the service-account key, and a token and kubeconfig per
// component.

package upstream

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/pki"
)

// writeCredentials makes the CA, the certificates, the service-account key, one token per
// component and their kubeconfigs, and returns the administrator's access.
func writeCredentials(c nodeConfig) (distro.Access, error) {
	fail := func(err error) (distro.Access, error) {
		return distro.Access{}, fmt.Errorf("upstream: credentials: %w", err)
	}
	ca, err := pki.NewCA("herd-" + c.name)
	if err != nil {
		return fail(err)
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return fail(err)
	}
	apiserver, err := ca.Issue(pki.Request{
		CommonName: "kube-apiserver",
		DNSNames: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local", "localhost", c.name},
		IPs:    []net.IP{net.IP(c.address.AsSlice()), net.IP(firstServiceIP().AsSlice()), net.IPv4(127, 0, 0, 1)},
		Server: true,
	})
	if err != nil {
		return fail(err)
	}
	kubeletClient, err := ca.Issue(pki.Request{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return fail(err)
	}
	kubeletServing, err := ca.Issue(pki.Request{CommonName: c.name, DNSNames: []string{c.name}, IPs: []net.IP{net.IP(c.address.AsSlice())}, Server: true})
	if err != nil {
		return fail(err)
	}
	// The aggregation layer (metrics-server's metrics.k8s.io, any extension API server): the API
	// server proxies to them with a client certificate of a CA of its own, so that no client of
	// the cluster CA can pass for the front proxy and name any user in the request headers.
	frontProxyCA, err := pki.NewCA("herd-front-proxy-" + c.name)
	if err != nil {
		return fail(err)
	}
	frontProxyClient, err := frontProxyCA.Issue(pki.Request{CommonName: frontProxyClientName, Client: true})
	if err != nil {
		return fail(err)
	}
	saKey, saPub, err := pki.NewSigningKey()
	if err != nil {
		return fail(err)
	}
	users := []user{
		{component: "admin", name: "herd-admin", groups: []string{"system:masters"}},
		{component: "controller-manager", name: "system:kube-controller-manager"},
		{component: "scheduler", name: "system:kube-scheduler"},
		{component: "kubelet", name: "system:node:" + c.name, groups: []string{"system:nodes"}},
		{component: "kube-proxy", name: "system:kube-proxy"},
	}
	if c.metrics {
		// The user the metrics add-on's RBAC binds (internal/addons).
		users = append(users, user{component: "metrics-server", name: "system:metrics-server"})
	}
	if c.clusterDNS.IsValid() {
		// The user the DNS add-on's RBAC binds (internal/addons).
		users = append(users, user{component: dnsComponent, name: dnsUser})
	}
	for i := range users {
		if users[i].token, err = pki.RandomToken(); err != nil {
			return fail(err)
		}
	}
	caPEM := ca.CertPEM()
	type file struct {
		path string
		data []byte
		perm os.FileMode
	}
	files := []file{
		{c.l.pki("ca.crt"), caPEM, 0o644},
		{c.l.pki("ca.key"), caKey, 0o600},
		{c.l.pki("apiserver.crt"), apiserver.CertPEM, 0o644},
		{c.l.pki("apiserver.key"), apiserver.KeyPEM, 0o600},
		{c.l.pki("kubelet-client.crt"), kubeletClient.CertPEM, 0o644},
		{c.l.pki("kubelet-client.key"), kubeletClient.KeyPEM, 0o600},
		{c.l.pki("kubelet.crt"), kubeletServing.CertPEM, 0o644},
		{c.l.pki("kubelet.key"), kubeletServing.KeyPEM, 0o600},
		{c.l.pki("front-proxy-ca.crt"), frontProxyCA.CertPEM(), 0o644},
		{c.l.pki("front-proxy-client.crt"), frontProxyClient.CertPEM, 0o644},
		{c.l.pki("front-proxy-client.key"), frontProxyClient.KeyPEM, 0o600},
		{c.l.pki("sa.key"), saKey, 0o600},
		{c.l.pki("sa.pub"), saPub, 0o644},
		{c.l.pki("tokens.csv"), []byte(tokensCSV(users)), 0o600},
	}
	server := "https://" + netip.AddrPortFrom(c.address, APIServerPort).String()
	var adm distro.Access
	for _, u := range users {
		a := distro.Access{Server: server, CAPEM: caPEM, Token: u.token}
		if u.component == "admin" {
			adm = a
			continue
		}
		kc, err := a.Kubeconfig(u.name)
		if err != nil {
			return fail(err)
		}
		files = append(files, file{c.l.kubeconfig(u.component), kc, 0o600})
	}
	for _, f := range files {
		if err := pki.WriteFile(f.path, f.data, f.perm); err != nil {
			return fail(err)
		}
	}
	return adm, nil
}
