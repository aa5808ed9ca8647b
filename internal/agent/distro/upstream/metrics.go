// Resource metrics: metrics-server, the metrics add-on's server, as a component of kube-combined.

package upstream

import (
	"strconv"
	"time"
)

// MetricsServerPort is where metrics-server serves metrics.k8s.io on the instance address. The
// metrics add-on's Service (kube-system/metrics-server) has no selector: kube-combined keeps its
// Endpoints at this address and port, and the API server's aggregation layer proxies to them.
const MetricsServerPort = 4443

// metricsService is the Service the metrics add-on's APIService names, NAMESPACE/NAME.
const metricsService = "kube-system/metrics-server"

// metricsResolution is how often metrics-server scrapes the kubelet.
const metricsResolution = 15 * time.Second

// metricsServerArgs are metrics-server's flags in kube-combined: its own (upstream's) and
// --service, kube-combined's, which names the Service whose Endpoints it keeps. It reads the
// kubelet on the node's InternalIP, checking the kubelet's certificate against the instance's CA,
// and authenticates to the kubelet, and delegates its own clients' authentication and
// authorization to the API server, as the user system:metrics-server (the add-on's RBAC). Its
// serving certificate is self-signed, in its own directory, as upstream's deployment has it (the
// APIService skips verifying it); the API server's front proxy authenticates to it with the
// front-proxy CA's client certificate, read from the extension-apiserver-authentication
// ConfigMap.
func metricsServerArgs(c nodeConfig) []string {
	kubeconfig := c.l.kubeconfig("metrics-server")
	return []string{
		"--service=" + metricsService,
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + c.address.String(),
		"--secure-port=" + strconv.Itoa(MetricsServerPort),
		"--cert-dir=" + c.l.path("metrics-server"),
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port=true",
		"--kubelet-certificate-authority=" + c.l.pki("ca.crt"),
		"--metric-resolution=" + metricsResolution.String(),
		"--profiling=false",
	}
}
