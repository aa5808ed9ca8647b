// The kube-dns Service's endpoint: the node's address, ready while the in-process CoreDNS
// answers for cluster.local.

package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

const (
	// dnsNamespace and dnsService name the Service pods' resolv.conf points at.
	dnsNamespace = "kube-system"
	dnsService   = "kube-dns"
	// dnsManager is the EndpointSlice's field manager and managed-by label: not the endpoint
	// slice controller's, which leaves a Service without selector to whoever writes its slices.
	dnsManager = "kube-combined"
	// dnsProbeName is the name whose answer says CoreDNS serves cluster.local from the API: the
	// API server's own Service, which every cluster has.
	dnsProbeName = "kubernetes.default.svc.cluster.local."
	// dnsProbeFast is how often the probe asks until CoreDNS first answers (the boot waits for
	// it); dnsProbeSlow how often after, as the pod's liveness probe did.
	dnsProbeFast = 200 * time.Millisecond
	dnsProbeSlow = 10 * time.Second
)

// dnsEndpoint keeps the kube-dns Service's EndpointSlice.
type dnsEndpoint struct {
	client  kubernetes.Interface
	address netip.Addr
	dns     *dns.Client
}

func newDNSEndpoint(kubeconfig, address string) (*dnsEndpoint, error) {
	addr, err := netip.ParseAddr(address)
	if err != nil || !addr.Is4() {
		return nil, fmt.Errorf("--address %q: want the node's IPv4 address", address)
	}
	if kubeconfig == "" {
		return nil, fmt.Errorf("--kubeconfig: want the kubeconfig the %s EndpointSlice is written with", dnsService)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return &dnsEndpoint{client: client, address: addr, dns: &dns.Client{Timeout: 2 * time.Second}}, nil
}

// run probes CoreDNS and writes the EndpointSlice whenever the verdict changes (or its last
// write failed), until ctx ends.
func (e *dnsEndpoint) run(ctx context.Context) {
	written, known := false, false
	every := dnsProbeFast
	for ctx.Err() == nil {
		ready := e.answers()
		if !known || ready != written {
			if err := e.write(ctx, ready); err != nil {
				klog.ErrorS(err, "Writing the cluster DNS endpoint", "ready", ready)
			} else {
				klog.InfoS("Cluster DNS endpoint written", "address", e.address, "ready", ready)
				written, known = ready, true
			}
		}
		if known && written {
			every = dnsProbeSlow
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// answers says whether CoreDNS, on the node's address, answers dnsProbeName with an address.
func (e *dnsEndpoint) answers() bool {
	q := new(dns.Msg).SetQuestion(dnsProbeName, dns.TypeA)
	r, _, err := e.dns.Exchange(q, netip.AddrPortFrom(e.address, 53).String())
	return err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0
}

// write applies the EndpointSlice with the endpoint ready or not, retrying for a while an API
// server that does not answer.
func (e *dnsEndpoint) write(ctx context.Context, ready bool) error {
	port := func(name, proto string, n int32) *discoveryv1ac.EndpointPortApplyConfiguration {
		return discoveryv1ac.EndpointPort().WithName(name).WithProtocol(corev1.Protocol(proto)).WithPort(n)
	}
	slice := discoveryv1ac.EndpointSlice(dnsService, dnsNamespace).
		WithLabels(map[string]string{
			discoveryv1.LabelServiceName: dnsService,
			discoveryv1.LabelManagedBy:   dnsManager,
		}).
		WithAddressType(discoveryv1.AddressTypeIPv4).
		WithEndpoints(discoveryv1ac.Endpoint().
			WithAddresses(e.address.String()).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(ready).WithServing(ready).WithTerminating(false))).
		WithPorts(port("dns", "UDP", 53), port("dns-tcp", "TCP", 53), port("metrics", "TCP", 9153))
	return wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.client.DiscoveryV1().EndpointSlices(dnsNamespace).Apply(ctx, slice, metav1.ApplyOptions{FieldManager: dnsManager, Force: true})
		if err != nil {
			klog.V(2).InfoS("Writing the cluster DNS endpoint", "err", err)
		}
		return err == nil, nil
	})
}
