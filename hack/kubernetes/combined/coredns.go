// The coredns component: cluster DNS, served by CoreDNS's own server and plugins in this process
// instead of a pod of its own. CoreDNS's binary is mostly the same client-go, apimachinery and
// Go runtime pages the other components already carry, so in this process its cost is its
// caches and goroutines alone. Its flags:
//
//	coredns --conf=COREFILE --kubeconfig=KUBECONFIG --address=NODE_IP
//
// The Corefile names the plugins below only (and its kubernetes block the kubeconfig to read the
// API with). The kube-dns Service has no selector: this component writes its one EndpointSlice,
// whose endpoint is the node's address (where the server listens, since this process runs in the
// node's network), ready while the server answers for cluster.local (dnsEndpoint). Pods keep
// asking the Service's ClusterIP, as the kubelet's clusterDNS tells them, and kube-proxy sends
// the queries to the node.

package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/spf13/pflag"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
)

// corednsDirectives are the plugins above in the order of CoreDNS' plugin.cfg, which is the order
// a query passes through them whatever the Corefile's order. reload is left out: the Corefile is
// written once, at the node's start, and a reload would run the kubernetes plugin's setup again
// (see startCoreDNS).
var corednsDirectives = []string{"bind", "prometheus", "errors", "log", "loadbalance", "cache", "kubernetes", "loop", "forward"}

func init() {
	dnsserver.Directives = corednsDirectives
	runners["coredns"] = prepareCoreDNS
	caddy.RegisterParsingCallback("dns", "kubernetes", func(caddy.Context) error {
		klog.ClearLogger()
		return nil
	})
}

// prepareCoreDNS parses the component's flags and returns what serves DNS until ctx ends.
func prepareCoreDNS(args []string) (func(ctx context.Context) error, error) {
	fs := pflag.NewFlagSet("coredns", pflag.ContinueOnError)
	conf := fs.String("conf", "", "the Corefile")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server the kube-dns EndpointSlice is written to")
	address := fs.String("address", "", "the node's address, the kube-dns Service's endpoint")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("coredns: %w", err)
	}
	ep, err := newDNSEndpoint(*kubeconfig, *address)
	if err != nil {
		return nil, fmt.Errorf("coredns: %w", err)
	}
	if *conf == "" {
		return nil, errors.New("coredns: --conf: want the Corefile's path")
	}
	corefile, err := os.ReadFile(*conf)
	if err != nil {
		return nil, fmt.Errorf("coredns: --conf: %w", err)
	}
	return func(ctx context.Context) error {
		inst, err := startCoreDNS(*conf, corefile)
		if err != nil {
			return fmt.Errorf("coredns: %w", err)
		}
		ep.run(ctx)
		if err := inst.Stop(); err != nil {
			klog.ErrorS(err, "Stopping CoreDNS")
		}
		for _, err := range inst.ShutdownCallbacks() {
			klog.ErrorS(err, "Stopping CoreDNS")
		}
		return nil
	}, nil
}

// startCoreDNS starts CoreDNS's servers for the Corefile. The kubernetes plugin's setup points
// klog, the whole process's log, at CoreDNS's logger, which writes to Go's standard log, which
// main points at klog (logs.InitLogs): a loop in which the first line logged waits
// forever for the standard log's lock it holds, and every component with it. So the standard log
// writes to stderr while CoreDNS starts; klog gets its own output back (what the components'
// logging configuration, the text format, had set) as soon as the plugin's setup is done (the
// parsing callback in init), not when Start returns: Start first waits, up to seconds, for the
// plugin's informers, and every component's lines meanwhile would lose their timestamps and
// key-value pairs to CoreDNS's format. When Start returns, the standard log goes to klog
// again. Nothing else sets the standard log's output while this process runs: main sets it
// once, before any component starts, and the kubelet and kube-proxy, whose commands set it as
// they start, are built without that (hack/kubernetes/patches/standard-log-once.patch).
func startCoreDNS(path string, corefile []byte) (*caddy.Instance, error) {
	log.SetOutput(os.Stderr)
	inst, err := caddy.Start(caddy.CaddyfileInput{Filepath: path, Contents: corefile, ServerTypeName: "dns"})
	// Again for a Start that failed after the plugin's setup and before its parsing callback:
	// klog must not point at CoreDNS's logger once the standard log goes to klog.
	klog.ClearLogger()
	log.SetOutput(logs.KlogWriter{})
	if err != nil {
		return nil, err
	}
	return inst, nil
}
