// Package agent is herd's in-instance agent: the process the provider starts inside an instance.
// It boots the instance's one-node Kubernetes from a node image bundle through a distribution
// (package distro and its implementations), imports the bundle's images into the node's
// container runtime, applies the bundle's manifests with server-side apply, and waits until the
// node is Ready and every baked Deployment, StatefulSet and DaemonSet is available before it
// reports Ready. No deploy step follows: the instance serves what its image holds.
//
// It reports through <state-dir>/status.json (see Status) and serves, on the instance address,
// /readyz, /livez and /metrics. On SIGTERM it stops the workload gracefully, then the cluster.
// docs/local-instance.md states the contract between the agent and the local provider.
//
// agent.go holds Run and the agent's life from start to stop; config.go its Config. The boot is
// in boot.go (isolate_*.go confines the agent first; bundle.go and manifests.go read and apply the
// bundle), readiness is checked in check.go from the verdicts of readiness.go, shutdown.go stops
// the workload, and status.go, server.go and metrics.go are what the agent reports.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/agentauth"
)

// KubeconfigFile is the name of the administrator kubeconfig in the state dir (mode 0600).
const KubeconfigFile = "kubeconfig"

// live is what /readyz answers.
type live struct {
	ready  bool
	reason string
}

// agent is one run of the agent.
type agent struct {
	cfg    Config
	log    *slog.Logger
	start  time.Time
	status *statusWriter
	hs     []cgroups.Hierarchy

	live       atomic.Pointer[live]
	bootMillis atomic.Uint64 // milliseconds from start to Ready; 0 until then

	mu    sync.Mutex
	dyn   dynamic.Interface
	pods  cache.SharedIndexInformer // every pod, for /metrics (watchPods)
	calls apiCalls                  // the agent's requests to the API server
	logs  *podLogs
	works []workloadRef
}

func (a *agent) setLive(ready bool, reason string) { a.live.Store(&live{ready: ready, reason: reason}) }

func (a *agent) client() dynamic.Interface {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dyn
}

func (a *agent) bootSeconds() float64 {
	ms := a.bootMillis.Load()
	return float64(ms) / 1000
}

func (a *agent) step(name string) {
	a.log.Info("boot step", "step", name, "seconds", seconds(time.Since(a.start)))
	if err := a.status.step(name); err != nil {
		a.log.Error("writing status", "err", err)
	}
}

func (a *agent) setPhase(p Phase, reason string) {
	if err := a.status.set(p, reason); err != nil {
		a.log.Error("writing status", "err", err)
	}
}

// isolateFn is isolate; tests of the agent's life cycle replace it, as they do not run as root.
var isolateFn = isolate

// seconds formats a duration as seconds with millisecond precision, for logs.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// errStop says that a stop was asked for (SIGTERM or SIGINT: ctx ended).
var errStop = errors.New("stop requested")

// Run runs the agent until ctx ends (SIGTERM, SIGINT) or the instance fails. It returns nil after
// a requested stop (status Stopped) and an error when the instance failed (status Failed).
func Run(ctx context.Context, cfg Config) error {
	start := time.Now()
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	a := &agent{cfg: cfg, log: cfg.Logger, start: start, status: newStatusWriter(filepath.Join(cfg.StateDir, StatusFile), start), calls: newAPICalls()}
	a.setLive(false, "booting")
	a.setPhase(PhaseBooting, "")

	hs, err := isolateFn(cfg.CgroupRoot, a.log)
	if err != nil {
		return a.failed(nil, err)
	}
	a.hs = hs
	a.step("isolated")

	b, err := loadBundle(cfg.BundleDir, !cfg.ImagesPreloaded)
	if err != nil {
		return a.failed(nil, err)
	}
	files, err := readManifests(b)
	if err != nil {
		return a.failed(nil, err)
	}
	objs, err := decodeManifests(files)
	if err != nil {
		return a.failed(nil, fmt.Errorf("bundle %s: %w", b.ShortDigest(), err))
	}
	distName := b.Config.Kubernetes.Distribution
	if distName == "" {
		distName = upstream.Name
	}
	d, ok := cfg.Distros[distName]
	if !ok {
		var names []string
		for n := range cfg.Distros {
			names = append(names, n)
		}
		sort.Strings(names)
		return a.failed(nil, fmt.Errorf("bundle %s wants distribution %q, which this herd cannot boot (it has: %s)", b.ShortDigest(), distName, strings.Join(names, ", ")))
	}
	var clusterDNS netip.Addr
	if d := b.Config.ClusterDNS; d != "" {
		if clusterDNS, err = netip.ParseAddr(d); err != nil {
			return a.failed(nil, fmt.Errorf("bundle %s: clusterDNS %q: %w", b.ShortDigest(), d, err))
		}
	}
	a.step("bundle verified")

	reg := prometheus.NewRegistry()
	// The Go runtime's collector: the agent's garbage collections and allocations beside the
	// other components' (theirs are in their own /metrics).
	reg.MustRegister(collector{a}, a.calls.total, collectors.NewGoCollector())
	ln, err := net.Listen("tcp", netip.AddrPortFrom(cfg.Address, uint16(cfg.Port)).String())
	if err != nil {
		return a.failed(nil, fmt.Errorf("agent endpoints: %w", err))
	}
	srv := &http.Server{Handler: agentauth.Require(cfg.Credential, a.handler(reg)), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	node, err := d.Start(ctx, distro.Spec{
		Name:            cfg.Name,
		Address:         cfg.Address,
		StateDir:        cfg.StateDir,
		CgroupRoot:      cfg.CgroupRoot,
		PauseImage:      b.Config.PauseImage,
		Version:         b.Config.Kubernetes.Version,
		ClusterDNS:      clusterDNS,
		WarmStore:       warmStore(b),
		StubZones:       stubZones(cfg.Discovery, clusterDNS.IsValid()),
		ResourceMetrics: b.Config.ResourceMetrics,
		Patient:         cfg.Patient,
		Logger:          a.log.With("distro", d.Name()),
		Step:            a.step,
	})
	if err != nil {
		return a.failed(nil, err)
	}

	err = a.boot(ctx, node, b, objs)
	switch {
	case errors.Is(err, errStop):
		return a.stop(node, context.Cause(ctx))
	case err != nil:
		return a.failed(node, err)
	}
	booted := time.Since(start)
	a.bootMillis.Store(uint64(booted.Milliseconds()))
	a.setLive(true, "")
	a.setPhase(PhaseReady, "")
	a.log.Info("ready", "seconds", seconds(booted))
	// The boot's garbage (decoded manifests, discovery) is gone: give the memory back now
	// rather than in minutes.
	debug.FreeOSMemory()

	if err := a.monitor(ctx, node, monitorResync); err != nil {
		return a.failed(node, err)
	}
	return a.stop(node, context.Cause(ctx))
}

// failed records Failed with err as the reason, stops what was started, and returns err.
func (a *agent) failed(node distro.Node, err error) error {
	a.setLive(false, "failed: "+err.Error())
	a.setPhase(PhaseFailed, err.Error())
	a.log.Error("instance failed", "reason", err.Error())
	a.teardown(node)
	return err
}

// stop stops the workload gracefully, then the cluster, and records Stopped. /readyz says
// "stopping", with why when the run was stopped with a cause (a spot interruption notice), so
// that herd knows the instance is going.
func (a *agent) stop(node distro.Node, why error) error {
	if why != nil && !errors.Is(why, context.Canceled) {
		a.setLive(false, "stopping: "+why.Error())
	} else {
		a.setLive(false, "stopping")
	}
	a.setPhase(PhaseStopping, "stop requested")
	a.log.Info("stopping")
	if dyn := a.client(); dyn != nil && node.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StopTimeout)
		left, err := stopWorkload(ctx, dyn)
		cancel()
		switch {
		case err != nil:
			a.log.Warn("stopping the workload gracefully", "err", err, "pods_left", left)
		default:
			a.step("workload stopped")
		}
	}
	a.teardown(node)
	a.setPhase(PhaseStopped, "")
	a.log.Info("stopped", "seconds", seconds(time.Since(a.start)))
	return nil
}

// teardown stops the node's components, kills whatever is left in the cgroup root but the
// agent, and removes what the agent can of the cgroups. Host directories such as the kubelet's
// /var/log/containers are the distribution's to keep clean (see distro.Node's Stop).
func (a *agent) teardown(node distro.Node) {
	if node != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := node.Stop(ctx); err != nil {
			a.log.Warn("stopping the node", "err", err)
		}
		cancel()
	}
	if root := a.cfg.CgroupRoot; root != "" && len(a.hs) > 0 {
		if left := cgroups.KillAll(a.hs, root, map[int]bool{os.Getpid(): true}, 3*time.Second); left > 0 {
			a.log.Warn("processes left in the cgroup root", "count", left)
		}
		keep := map[string]bool{root: true, path.Join(root, "system"): true}
		if err := cgroups.Remove(a.hs, root, keep); err != nil {
			a.log.Debug("removing cgroups", "err", err)
		}
	}
}
