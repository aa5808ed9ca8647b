// metrics-server, the cluster add-on that serves the metrics.k8s.io API (resource metrics, for
// `kubectl top` and HorizontalPodAutoscalers), as a component of this process: its upstream
// command package (sigs.k8s.io/metrics-server/cmd/metrics-server/app) with its own flags, plus
// one of this process's own:
//
//	kube-combined ... -- metrics-server --service=kube-system/metrics-server --bind-address=ADDR --secure-port=PORT ...
//
// In a pod, metrics-server is reached through its Service's endpoints, which the endpoints
// controller keeps from the pod's address. Out of a pod, the Service has no selector, and this
// process keeps its Endpoints instead: one address, --bind-address, and one port named as the
// Service's, --secure-port. The API server's aggregation layer proxies metrics.k8s.io to that
// endpoint as it would to a pod's.
//
// The command's stop channel is the process's context (the binary's main installs the apiserver
// library's signal handler, which this process must not install twice).

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metricsapp "sigs.k8s.io/metrics-server/cmd/metrics-server/app"
)

func init() {
	runners["metrics-server"] = prepareMetricsServer
}

// serviceFlag names the Service whose Endpoints this process keeps, as NAMESPACE/NAME. It is
// taken out of metrics-server's flags, which do not know it.
const serviceFlag = "--service"

// prepareMetricsServer prepares metrics-server's upstream command with its flags, less
// --service, and returns what runs it and keeps the Service's Endpoints until ctx ends.
func prepareMetricsServer(args []string) (func(ctx context.Context) error, error) {
	var service string
	var rest []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, serviceFlag+"="); ok {
			service = v
			continue
		}
		rest = append(rest, a)
	}
	var pub *publisher
	if service != "" {
		var err error
		if pub, err = newPublisher(service, rest); err != nil {
			return nil, fmt.Errorf("metrics-server: %w", err)
		}
	}
	stop := make(chan struct{})
	run, err := command(func() *cobra.Command {
		cmd := metricsapp.NewMetricsServerCommand(stop)
		cmd.Use = "metrics-server"
		return cmd
	})(rest)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			close(stop)
		}()
		if pub != nil {
			go pub.run(ctx)
		}
		return run(ctx)
	}, nil
}

// newPublisher reads from metrics-server's flags what the Endpoints of service (NAMESPACE/NAME)
// must say (--bind-address, --secure-port) and how to reach the API server (--kubeconfig).
func newPublisher(service string, args []string) (*publisher, error) {
	ns, name, ok := strings.Cut(service, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("%s=%q: want NAMESPACE/NAME of the Service the APIService names", serviceFlag, service)
	}
	fs := pflag.NewFlagSet("metrics-server", pflag.ContinueOnError)
	fs.ParseErrorsWhitelist.UnknownFlags = true
	bind := fs.IP("bind-address", nil, "")
	port := fs.Int32("secure-port", 0, "")
	kubeconfig := fs.String("kubeconfig", "", "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var errs []error
	if *bind == nil || bind.IsUnspecified() || bind.IsLoopback() {
		errs = append(errs, fmt.Errorf("%s needs --bind-address=ADDRESS, the node's address the Endpoints name (not %v: an endpoint cannot be a loopback or unspecified address)", serviceFlag, *bind))
	}
	if *port <= 0 || *port > 65535 {
		errs = append(errs, fmt.Errorf("%s needs --secure-port=PORT, the port the Endpoints name", serviceFlag))
	}
	if *kubeconfig == "" {
		errs = append(errs, fmt.Errorf("%s needs --kubeconfig=FILE, the credentials that write the Endpoints", serviceFlag))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	client, err := publisherClient(*kubeconfig)
	if err != nil {
		return nil, err
	}
	return &publisher{client: client, namespace: ns, name: name, address: net.IP(*bind).String(), port: *port}, nil
}
