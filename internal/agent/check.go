// The readiness check against the cluster's API server, run by waitReady during the boot and by
// monitor after it; readiness.go judges each object it fetches.

package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"herd.dev/herd/internal/agent/distro"
)

// monitorResync is how often monitor evaluates with no change seen: an API server that stops
// answering sends no change, and the verdict should say so.
const monitorResync = 30 * time.Second

// monitor keeps /readyz current until ctx ends (nil) or a component fails (its error). It
// evaluates when the node or a workload changes, as the API server's watches report it (at
// once, where a poll every 2 s took up to 2 s, and with no request while nothing changes: the
// poll was most of an idle instance's requests), and every resync.
func (a *agent) monitor(ctx context.Context, node distro.Node, resync time.Duration) error {
	a.mu.Lock()
	dyn, works := a.dyn, a.works
	a.mu.Unlock()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	changed := make(chan struct{}, 1)
	watchChanges(wctx, dyn, a.cfg.Name, works, changed)
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-node.Failed():
			return node.Err()
		case <-changed:
		case <-t.C:
		}
		bound := 5 * time.Second
		if a.cfg.Patient {
			bound = Patience.Check
		}
		cctx, cancel := context.WithTimeout(ctx, bound)
		r := a.evaluate(cctx, false, cachedRead)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		a.setLive(r.ready, r.reason)
	}
}

// readiness is the result of one check.
type readiness struct {
	ready     bool
	nodeReady bool
	// available names the workloads whose controllers count them available (kind/namespace/name),
	// whatever their pods look like: the boot's timeline records when each first is.
	available []string
	reason    string // when not ready: everything not ready, "; "-separated
	terminal  bool   // a workload can never become available
	// lastStart is the latest start of a running container among the pods of every workload,
	// as the kubelet stamped it; startsKnown says every workload's pods were looked at for it.
	lastStart   time.Time
	startsKnown bool
}

// cachedRead is how monitor reads the node and the workloads: from the API server's watch cache,
// as current as the cache's watch of etcd, instead of a quorum read of etcd per object every 2 s,
// which was most of an idle instance's reads of etcd (2.5 a second of 3.7).
var cachedRead = metav1.GetOptions{ResourceVersion: "0"}

// check evaluates the node and every workload, read from etcd. With withPods, a workload that is
// not available is explained by its pods' states.
func (a *agent) check(ctx context.Context, withPods bool) readiness {
	return a.evaluate(ctx, withPods, metav1.GetOptions{})
}

// evaluate is check, with the node and the workloads read with get.
func (a *agent) evaluate(ctx context.Context, withPods bool, get metav1.GetOptions) readiness {
	a.mu.Lock()
	dyn, works, logs := a.dyn, a.works, a.logs
	a.mu.Unlock()
	r := readiness{startsKnown: withPods}
	var reasons []string
	var n corev1.Node
	if err := getTyped(ctx, dyn.Resource(nodesGVR), a.cfg.Name, get, &n); err != nil {
		if apierrors.IsNotFound(err) {
			reasons = append(reasons, fmt.Sprintf("node %s has not registered yet", a.cfg.Name))
		} else {
			reasons = append(reasons, fmt.Sprintf("node %s: %v", a.cfg.Name, err))
		}
	} else if v := nodeVerdict(&n); v.ready {
		r.nodeReady = true
	} else {
		reasons = append(reasons, v.why)
	}
	for _, w := range works {
		v, selector := a.workloadVerdict(ctx, dyn, w, get)
		if v.ready {
			r.available = append(r.available, w.String())
		}
		var pods []corev1.Pod
		var podsErr error = errNoPodLook
		if withPods && selector != "" {
			pods, podsErr = listPods(ctx, dyn, w.Namespace, selector)
		}
		if v.ready && (podsErr != nil || podsSteady(pods)) {
			if last, ok := latestStart(pods); podsErr == nil && ok {
				if last.After(r.lastStart) {
					r.lastStart = last
				}
			} else {
				r.startsKnown = false
			}
			continue
		}
		why := v.why
		if v.ready {
			// Available, but a container no longer runs: it has just exited.
			why = "available, but not every container runs"
		}
		if podsErr == nil {
			rep, terminal := podsReport(pods, func(p *corev1.Pod, container string, previous bool) string {
				return logs.tail(ctx, p.Namespace, p.Name, container, previous)
			})
			why += "; " + rep
			if terminal {
				v.terminal = true
			}
		}
		sep := ": "
		if v.terminal {
			r.terminal = true
			sep = " can never become available: "
		}
		reasons = append(reasons, w.String()+sep+why)
	}
	r.ready = len(reasons) == 0
	r.reason = strings.Join(reasons, "; ")
	return r
}

// errNoPodLook stands for the pods of a check that did not look at them.
var errNoPodLook = errors.New("pods not looked at")

// listPods lists the pods of one workload.
func listPods(ctx context.Context, dyn dynamic.Interface, namespace, selector string) ([]corev1.Pod, error) {
	list, err := dyn.Resource(podsGVR).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	pods := make([]corev1.Pod, len(list.Items))
	for i := range list.Items {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &pods[i])
	}
	return pods, nil
}

// workloadVerdict fetches (with get) and evaluates one workload, and returns its pod selector.
func (a *agent) workloadVerdict(ctx context.Context, dyn dynamic.Interface, w workloadRef, get metav1.GetOptions) (verdict, string) {
	ri := dyn.Resource(w.gvr()).Namespace(w.Namespace)
	var v verdict
	var sel *metav1.LabelSelector
	var err error
	switch w.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err = getTyped(ctx, ri, w.Name, get, &d); err == nil {
			v, sel = deploymentVerdict(&d), d.Spec.Selector
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err = getTyped(ctx, ri, w.Name, get, &s); err == nil {
			v, sel = statefulSetVerdict(&s), s.Spec.Selector
		}
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err = getTyped(ctx, ri, w.Name, get, &d); err == nil {
			v, sel = daemonSetVerdict(&d), d.Spec.Selector
		}
	case "Service":
		return serviceVerdict(ctx, dyn, w, get), ""
	}
	if err != nil {
		return verdict{why: err.Error()}, ""
	}
	selector := ""
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && sel != nil {
		selector = s.String()
	}
	return v, selector
}

// getTyped gets one object with opts and converts it into out.
func getTyped(ctx context.Context, ri dynamic.ResourceInterface, name string, opts metav1.GetOptions, out any) error {
	u, err := ri.Get(ctx, name, opts)
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}
