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
//
// metrics-server starts once its credentials may read the API server's
// extension-apiserver-authentication ConfigMap (the add-on's RBAC, which the agent applies once
// the API server is ready): it reads it as it starts, and returns when it may not, which in this
// process would end every component. A pod would be restarted instead.

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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
	f, err := parseMetricsFlags(rest)
	if err != nil {
		return nil, fmt.Errorf("metrics-server: %w", err)
	}
	var client kubernetes.Interface
	if f.kubeconfig != "" {
		if client, err = publisherClient(f.kubeconfig); err != nil {
			return nil, fmt.Errorf("metrics-server: %w", err)
		}
	}
	var pub *publisher
	if service != "" {
		if pub, err = newPublisher(service, f, client); err != nil {
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
		if client != nil {
			if err := waitAuthenticationConfig(ctx, client); err != nil {
				return fmt.Errorf("metrics-server: %w", err)
			}
		}
		return run(ctx)
	}, nil
}

// metricsFlags are the flags of metrics-server that kube-combined reads too.
type metricsFlags struct {
	bind       net.IP
	port       int32
	kubeconfig string
}

// parseMetricsFlags reads --bind-address, --secure-port and --kubeconfig from metrics-server's
// flags, leaving the others to its command.
func parseMetricsFlags(args []string) (metricsFlags, error) {
	fs := pflag.NewFlagSet("metrics-server", pflag.ContinueOnError)
	fs.ParseErrorsWhitelist.UnknownFlags = true
	bind := fs.IP("bind-address", nil, "")
	port := fs.Int32("secure-port", 0, "")
	kubeconfig := fs.String("kubeconfig", "", "")
	if err := fs.Parse(args); err != nil {
		return metricsFlags{}, err
	}
	return metricsFlags{bind: *bind, port: *port, kubeconfig: *kubeconfig}, nil
}

// newPublisher checks that metrics-server's flags say what the Endpoints of service
// (NAMESPACE/NAME) must say (--bind-address, --secure-port) and how to reach the API server
// (--kubeconfig: client).
func newPublisher(service string, f metricsFlags, client kubernetes.Interface) (*publisher, error) {
	ns, name, ok := strings.Cut(service, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("%s=%q: want NAMESPACE/NAME of the Service the APIService names", serviceFlag, service)
	}
	var errs []error
	if f.bind == nil || f.bind.IsUnspecified() || f.bind.IsLoopback() {
		errs = append(errs, fmt.Errorf("%s needs --bind-address=ADDRESS, the node's address the Endpoints name (not %v: an endpoint cannot be a loopback or unspecified address)", serviceFlag, f.bind))
	}
	if f.port <= 0 {
		errs = append(errs, fmt.Errorf("%s needs --secure-port=PORT, the port the Endpoints name", serviceFlag))
	}
	if client == nil {
		errs = append(errs, fmt.Errorf("%s needs --kubeconfig=FILE, the credentials that write the Endpoints", serviceFlag))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &publisher{client: client, namespace: ns, name: name, address: f.bind.String(), port: f.port}, nil
}

// waitAuthenticationConfig waits until client may read the ConfigMap in which the API server
// publishes how to authenticate its front proxy and its clients' certificates, which
// metrics-server reads as it starts, or ctx ends (an error).
func waitAuthenticationConfig(ctx context.Context, client kubernetes.Interface) error {
	logged := false
	return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		if err != nil && !logged {
			klog.InfoS("Waiting to read the API server's authentication configuration (the metrics add-on's RBAC)", "err", err)
			logged = true
		}
		return err == nil, nil
	})
}
