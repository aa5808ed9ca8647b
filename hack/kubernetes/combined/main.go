// Command kube-combined runs several upstream Kubernetes components in one process, each from
// its own upstream command package and with the flags it would take as a binary of its own:
//
//	kube-combined kube-controller-manager --kubeconfig=... -- kube-scheduler --kubeconfig=... -- kubelet ...
//
// Arguments are one group per component, separated by "--", each starting with the component's
// name. With kube-apiserver among them and --start-after-ready=KUBECONFIG first (then, optionally,
// --bootstrapped), the API server
// starts first and the others once the API server KUBECONFIG names answers /readyz (started
// together, they would compete with its start-up for the CPU, then wait in their retry
// back-off); the kubelet starts sooner, once /readyz passes but for the checks of the bootstrap
// writes it does not need (bootstrapChecks), and so do the others with --bootstrapped (a store
// that holds those objects already), but for kube-controller-manager, which starts once the API
// server's /healthz passes (see below), and kube-scheduler and kube-proxy, which start once the
// kubelet's node is registered (nodewait.go). herd's local instances run their components this way
// because every component carries its own copy of the same libraries' code and static data
// (client-go, apimachinery, the API schemes): in one process those pages are counted, and
// touched, once.
//
// What one process changes, and how it is handled:
//   - Each command registers its flags on a flag set of its own; the global ones (klog, version)
//     point at the same variables, which is harmless since every component gets the same logging
//     flags (none).
//   - Logging is configured by every component; a second identical configuration is accepted
//     (logsapi.ReapplyHandlingIgnoreUnchanged) instead of refused.
//   - The API server's and the scheduler's commands each install the apiserver library's signal
//     handler, which may be installed once per process (the kubelet installs it too): those two
//     are started here from their exported Setup/Complete and Run functions, with this process's
//     context, in the same steps as their commands take.
//   - The CSI volume plugin keeps its node info manager in a package variable, which every
//     Init set: the kubelet's with its node's name, kube-controller-manager's volume controllers'
//     with none. Set last by the controller manager, the kubelet's CSINode initialization asked
//     for a node with an empty name until it gave up and ended the process. A patch
//     (hack/kubernetes/patches/csi-node-info-manager.patch) has only the kubelet set it, so the
//     two start in either order.
//   - kube-controller-manager waits for the API server's /healthz before it starts its
//     controllers, polling once a second (for at most 10 s, then it ends the process): started
//     a moment before /healthz passes, it would wait most of a second; on a slow machine (a disk
//     image booted without KVM) the bootstrap hooks took longer than the 10 s. With the API
//     server waited for, it starts once /healthz passes, waited for without a bound.
//   - A component that returns, with or without an error, ends the process with status 1: the
//     components are one unit for whoever supervises the process, and one failing fails them all.
//     SIGTERM or SIGINT ends the process with status 0 once the components that watch their
//     context have stopped (at most stopGrace).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "time/tzdata" // CronJob time zones, as in kube-controller-manager's and kube-apiserver's mains

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register"          // as in every component's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics, as in every component's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric, as in every component's main
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// stopGrace is how long the process waits, after SIGTERM, for its components to stop.
const stopGrace = 10 * time.Second

// runners prepare one component with its arguments (build its command or options and, for
// those started here, parse its flags) and return what runs it until it stops. They are called
// one after the other: the commands' constructors register shared defaults (the "kube"
// component's version and feature gate) when nobody has yet.
var runners = map[string]func(args []string) (func(ctx context.Context) error, error){
	"kube-apiserver":          prepareAPIServer,
	"kube-controller-manager": command(cmapp.NewControllerManagerCommand),
	"kube-scheduler":          prepareScheduler,
	"kubelet":                 command(kubeletapp.NewKubeletCommand),
	"kube-proxy":              command(proxyapp.NewProxyCommand),
}

// result is how one component's run ended.
type result struct {
	name string
	err  error
}

// group is one component and its arguments.
type group struct {
	name string
	args []string
}

// parseGroups splits the command line into one group per component.
func parseGroups(args []string) ([]group, error) {
	var out []group
	for len(args) > 0 {
		i := slices.Index(args, "--")
		if i < 0 {
			i = len(args)
		}
		part := args[:i]
		args = args[min(i+1, len(args)):]
		if len(part) == 0 {
			return nil, errors.New("empty component group: each group between -- separators starts with a component's name")
		}
		if _, ok := runners[part[0]]; !ok {
			return nil, fmt.Errorf("unknown component %q: want one of %s", part[0], strings.Join(names(), ", "))
		}
		if slices.ContainsFunc(out, func(g group) bool { return g.name == part[0] }) {
			return nil, fmt.Errorf("component %q given twice", part[0])
		}
		out = append(out, group{name: part[0], args: part[1:]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no component given: usage: kube-combined COMPONENT [FLAGS] [-- COMPONENT [FLAGS]]... (components: %s)", strings.Join(names(), ", "))
	}
	return out, nil
}

func names() []string {
	var n []string
	for k := range runners {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

func main() {
	bootGC()
	args := os.Args[1:]
	var readyKubeconfig string
	if len(args) > 0 && strings.HasPrefix(args[0], readyFlag+"=") {
		readyKubeconfig = strings.TrimPrefix(args[0], readyFlag+"=")
		args = args[1:]
	}
	// Everyone's wait: all of /readyz, or, on a store that holds the bootstrap objects already,
	// all but the checks of the hooks that write them.
	var othersExclude []string
	if len(args) > 0 && args[0] == bootstrappedFlag {
		othersExclude = bootstrapChecks
		args = args[1:]
	}
	groups, err := parseGroups(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-combined: %v\n", err)
		os.Exit(2)
	}
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	// The standard log goes to klog, set here once for every component: the kubelet and
	// kube-proxy, whose commands set it as they start, are built without that (a patch,
	// standard-log-once), so that none resets it while CoreDNS starts (startCoreDNS).
	logs.InitLogs()
	defer logs.FlushLogs()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runs := make([]func(context.Context) error, len(groups))
	for i, g := range groups {
		if runs[i], err = runners[g.name](g.args); err != nil {
			klog.ErrorS(err, "Component cannot start", "component", g.name)
			logs.FlushLogs()
			os.Exit(1)
		}
	}
	done := make(chan result, len(groups))
	start := func(i int) {
		g := groups[i]
		klog.InfoS("Starting component", "component", g.name, "args", g.args)
		go func() {
			done <- result{g.name, runs[i](ctx)}
		}()
	}
	index := func(name string) int { return slices.IndexFunc(groups, func(g group) bool { return g.name == name }) }
	api := index("kube-apiserver")
	if api >= 0 && readyKubeconfig != "" {
		start(api)
		go func() {
			cm, kubelet := index("kube-controller-manager"), index("kubelet")
			if kubelet >= 0 {
				if err := waitOK(ctx, readyKubeconfig, "/readyz", bootstrapChecks, done); err != nil {
					klog.ErrorS(err, "Not starting the other components")
					return
				}
				klog.InfoS("kube-apiserver serves what the kubelet needs; starting the kubelet")
				start(kubelet)
			}
			if err := waitOK(ctx, readyKubeconfig, "/readyz", othersExclude, done); err != nil {
				klog.ErrorS(err, "Not starting the other components")
				return
			}
			klog.InfoS("kube-apiserver is ready; starting the other components")
			// The components of afterNode wait for the kubelet's node (nodewait.go).
			var node, nodeKubeconfig string
			if kubelet >= 0 {
				node, nodeKubeconfig = nodeToWaitFor(groups[kubelet])
			}
			var waiting []int
			for i, g := range groups {
				switch {
				case i == api || i == kubelet || i == cm:
				case node != "" && slices.Contains(afterNode, g.name):
					waiting = append(waiting, i)
				default:
					start(i)
				}
			}
			if len(waiting) > 0 {
				go func() {
					if err := waitNode(ctx, nodeKubeconfig, node, done); err != nil {
						klog.ErrorS(err, "Not starting the components that wait for the node")
						return
					}
					klog.InfoS("The node is registered; starting the components that wait for it", "node", node)
					for _, i := range waiting {
						start(i)
					}
				}()
			}
			if cm >= 0 {
				if err := waitOK(ctx, readyKubeconfig, "/healthz", nil, done); err != nil {
					klog.ErrorS(err, "Not starting kube-controller-manager")
					return
				}
				klog.InfoS("kube-apiserver is healthy; starting kube-controller-manager")
				start(cm)
			}
		}()
	} else {
		for i := range groups {
			start(i)
		}
	}
	select {
	case r := <-done:
		if ctx.Err() == nil {
			klog.ErrorS(r.err, "Component stopped; stopping every component of this process", "component", r.name)
			logs.FlushLogs()
			os.Exit(1)
		}
	case <-ctx.Done():
	}
	klog.InfoS("Stopping", "components", len(groups))
	t := time.NewTimer(stopGrace)
	for range groups {
		select {
		case r := <-done:
			klog.InfoS("Component stopped", "component", r.name, "err", r.err)
		case <-t.C:
			logs.FlushLogs()
			os.Exit(0)
		}
	}
	logs.FlushLogs()
}

// readyFlag, first on the command line, names a kubeconfig whose API server must answer /readyz
// before the components other than kube-apiserver start.
const readyFlag = "--start-after-ready"

// clientFor makes a client of the API server kubeconfig names, each request bounded to a second.
func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = time.Second
	return kubernetes.NewForConfig(cfg)
}

// bootstrappedFlag, first on the command line after readyFlag, says that the API server's store
// holds the bootstrap objects already (a node's warm store, made when its image was built): every
// component but kube-controller-manager starts once /readyz passes but for bootstrapChecks, whose
// hooks find their objects in place.
const bootstrappedFlag = "--bootstrapped"

// bootstrapChecks are the API server's readiness checks the kubelet does not wait for: the post-start
// hooks that write the default RBAC policy (each of its objects one etcd write, with its fsync),
// the system priority classes and API Priority and Fairness' flow schemas and priority levels (a
// write each). The kubelet needs none of them: the Node authorizer, not RBAC, authorizes it; a
// node needs no priority class (its pods, which do, come from the controller-manager, started once
// the API server is healthy); and until the flow schemas are written, API Priority and Fairness
// serves every request by the mandatory levels it keeps in memory. On an empty store the kubelet
// starts while the hooks write, mostly etcd's fsyncs.
var bootstrapChecks = []string{
	"poststarthook/rbac/bootstrap-roles",
	"poststarthook/scheduling/bootstrap-system-priority-classes",
	"poststarthook/priority-and-fairness-config-producer",
}

// waitOK polls GET path (/readyz, /healthz), less the checks excluded, of the API server that
// kubeconfig names until it answers 200 (see poll).
func waitOK(ctx context.Context, kubeconfig, path string, excluded []string, done chan result) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", readyFlag, err)
	}
	return poll(ctx, 100*time.Millisecond, done, "the API server was ready", func() (bool, error) {
		var code int
		req := client.Discovery().RESTClient().Get().AbsPath(path)
		for _, check := range excluded {
			req = req.Param("exclude", check)
		}
		req.Do(ctx).StatusCode(&code)
		return code == 200, nil
	})
}

// poll calls check every period until it returns true (then nil) or an error, ctx ends (an
// error) or a component stops before what is waited for (done has a result: then it is put
// back, and an error).
func poll(ctx context.Context, period time.Duration, done chan result, waitedFor string, check func() (bool, error)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if ok, err := check(); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-done:
			done <- r
			return fmt.Errorf("%s stopped before %s", r.name, waitedFor)
		case <-t.C:
		}
	}
}

// command prepares a component's upstream command, which parses its flags and runs when
// executed, as component-base's cli.Run does for its main, returning the command's error instead
// of exiting.
func command(newCommand func() *cobra.Command) func(args []string) (func(ctx context.Context) error, error) {
	return func(args []string) (func(ctx context.Context) error, error) {
		cmd := newCommand()
		cmd.SetGlobalNormalizationFunc(cliflag.WordSepNormalizeFunc)
		cmd.SilenceUsage = true
		cmd.SilenceErrors = true
		cmd.SetArgs(args)
		return func(ctx context.Context) error {
			if err := cmd.ExecuteContext(ctx); err != nil {
				return fmt.Errorf("%s: %w", cmd.Name(), err)
			}
			return nil
		}, nil
	}
}

// flagSet merges a component's named flag sets, with the global ones, into one flag set.
func flagSet(name string, nfs *cliflag.NamedFlagSets) *pflag.FlagSet {
	verflag.AddFlags(nfs.FlagSet("global"))
	globalflag.AddGlobalFlags(nfs.FlagSet("global"), name, logs.SkipLoggingConfigurationFlags())
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	return fs
}

// prepareScheduler takes the steps of kube-scheduler's command, with the process's context
// instead of the signal handler the command installs.
func prepareScheduler(args []string) (func(ctx context.Context) error, error) {
	opts := scheduleroptions.NewOptions()
	fs := flagSet("kube-scheduler", opts.Flags)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	return func(ctx context.Context) error {
		if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
		fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
		if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
		cliflag.PrintFlags(fs)
		cc, sched, err := schedulerapp.Setup(ctx, opts)
		if err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
		fg.(featuregate.MutableFeatureGate).AddMetrics()
		if err := schedulerapp.Run(ctx, cc, sched); err != nil {
			return fmt.Errorf("kube-scheduler: %w", err)
		}
		return nil
	}, nil
}

// prepareAPIServer takes the steps of kube-apiserver's command, with the process's context
// instead of the signal handler the command installs.
func prepareAPIServer(args []string) (func(ctx context.Context) error, error) {
	s := apiserveroptions.NewServerRunOptions()
	nfs := s.Flags()
	apiserveroptions.AddCustomGlobalFlags(nfs.FlagSet("generic"))
	fs := flagSet("kube-apiserver", &nfs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	return func(ctx context.Context) error {
		if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
		// As the command does: the API server's loopback clients do not log their own warnings.
		rest.SetDefaultWarningHandler(rest.NoWarnings{})
		fg := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
		if err := logsapi.ValidateAndApply(s.Logs, fg); err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
		cliflag.PrintFlags(fs)
		completed, err := s.Complete(ctx)
		if err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
		if errs := completed.Validate(); len(errs) != 0 {
			return fmt.Errorf("kube-apiserver: %w", utilerrors.NewAggregate(errs))
		}
		fg.(featuregate.MutableFeatureGate).AddMetrics()
		if err := apiserverapp.Run(ctx, completed); err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
		return nil
	}, nil
}
