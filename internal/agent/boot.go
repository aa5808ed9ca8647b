// The boot: importing the bundle's images and applying its manifests as soon as the node allows,
// then waiting until the node is Ready and every workload available.

package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/localpv"
	"herd.dev/herd/internal/agent/pki"
	"herd.dev/herd/internal/image/bundle"
)

// boot imports the images (unless they are preloaded) and applies the manifests as soon as the
// node allows, then waits until the node is Ready and every workload available. It returns
// errStop if ctx ends first.
func (a *agent) boot(ctx context.Context, node distro.Node, b bundle.Bundle, objs []object) error {
	bootCtx, cancel := context.WithDeadline(ctx, a.start.Add(a.cfg.ReadyTimeout))
	defer cancel()
	// wait waits for ch, the node's failure, the stop, or the boot's deadline.
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case <-node.Failed():
			return node.Err()
		case <-bootCtx.Done():
			if ctx.Err() != nil {
				return errStop
			}
			return fmt.Errorf("%s not within --ready-timeout %s", what, a.cfg.ReadyTimeout)
		}
	}

	// importErr is set before imported is closed.
	var importErr error
	imported := make(chan struct{})
	go func() {
		defer close(imported)
		if a.cfg.ImagesPreloaded {
			return
		}
		if importErr = wait(node.RuntimeReady(), "container runtime ready"); importErr != nil {
			return
		}
		g, gctx := errgroup.WithContext(bootCtx)
		for _, im := range b.Config.Images {
			g.Go(func() error { return node.ImportImage(gctx, im.Ref, b.Path(im.File)) })
		}
		if importErr = g.Wait(); importErr == nil {
			a.step("images imported")
		}
	}()

	if err := wait(node.APIReady(), "API server ready"); err != nil {
		return err
	}
	acc := node.Access()
	kc, err := acc.Kubeconfig("herd-admin")
	if err != nil {
		return err
	}
	if err := pki.WriteFile(filepath.Join(a.cfg.StateDir, KubeconfigFile), kc, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	rc := &rest.Config{
		Host:            acc.Server,
		BearerToken:     acc.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: acc.CAPEM},
		QPS:             50,
		Burst:           100,
		UserAgent:       "herd-agent",
		WrapTransport:   a.calls.wrap,
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	logs, err := newPodLogs(rc)
	if err != nil {
		return err
	}
	pods := watchPods(ctx, dyn)
	a.mu.Lock()
	a.dyn, a.logs, a.pods = dyn, logs, pods
	a.mu.Unlock()
	// The storage add-on's provisioner: from now on, so that a workload's claims are bound
	// during the boot; it acts only on claims of a class that names it.
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	pv := &localpv.Provisioner{Node: a.cfg.Name, Root: localpv.Root, Log: a.log}
	go pv.Run(ctx, cs)

	if err := wait(imported, "images imported"); err != nil {
		return err
	}
	if importErr != nil {
		if ctx.Err() != nil {
			return errStop // an import cut short by the stop
		}
		return importErr
	}

	retryFor := defaultApplyRetry
	if a.cfg.Patient {
		retryFor = Patience.ApplyRetry
	}
	ap, err := newApplier(rc, dyn, retryFor)
	if err != nil {
		return err
	}
	works, err := ap.apply(bootCtx, objs)
	if err != nil {
		if ctx.Err() != nil {
			return errStop
		}
		return err
	}
	if b.Config.ClusterDNS != "" {
		// Served by the node, not by a workload of the manifests.
		works = append(works, clusterDNSWork)
	}
	a.mu.Lock()
	a.works = works
	a.mu.Unlock()
	a.step("manifests applied")

	return a.waitReady(ctx, bootCtx, node)
}

// steadyFor is how long the workloads' containers must have run, and stayed available, before the
// boot counts them as such.
const steadyFor = time.Second

// startStampResolution is the resolution of the containers' start times the kubelet reports: a
// container stamped at t started before t plus this.
const startStampResolution = time.Second

// waitReady polls until the node is Ready and every workload available, steadily.
func (a *agent) waitReady(ctx, bootCtx context.Context, node distro.Node) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var nodeReadySeen bool
	availableSeen := map[string]bool{}
	var terminalSince, readySince time.Time
	var last readiness
	for i := 0; ; i++ {
		// The pods are looked at once a second, and at every poll while one looks terminal or
		// while a verdict of ready waits to be confirmed by them.
		withPods := i%5 == 4 || !terminalSince.IsZero() || !readySince.IsZero()
		r := a.check(bootCtx, withPods)
		// Ready is steady once every container has run for steadyFor by its start time (it
		// usually has by the time its readiness probe passes), or else once the verdict has held
		// for steadyFor as the agent saw it.
		ranSteadily := r.startsKnown && time.Since(r.lastStart) >= steadyFor+startStampResolution
		settled := !readySince.IsZero() && time.Since(readySince) >= steadyFor || ranSteadily
		if withPods || last.reason == "" {
			last = r
		}
		if r.nodeReady && !nodeReadySeen {
			nodeReadySeen = true
			a.step("node Ready")
		}
		for _, w := range r.available {
			if !availableSeen[w] {
				availableSeen[w] = true
				a.step(w + " available")
			}
		}
		switch {
		case r.ready && settled && withPods:
			a.step("workloads available")
			return nil
		case r.ready:
			// A crash-looping container makes its workload available for a moment: ready
			// counts once it has held for steadyFor and the pods confirm it.
			if readySince.IsZero() {
				readySince = time.Now()
			}
			terminalSince = time.Time{}
		default:
			readySince = time.Time{}
			a.setLive(false, "booting: "+r.reason)
			if !r.terminal {
				terminalSince = time.Time{}
			} else if terminalSince.IsZero() {
				terminalSince = time.Now()
			} else if time.Since(terminalSince) > 3*time.Second {
				return errors.New(r.reason)
			}
		}
		select {
		case <-node.Failed():
			return node.Err()
		case <-bootCtx.Done():
			if ctx.Err() != nil {
				return errStop
			}
			// One more look with the pods, bounded: an API server too slow to answer must not
			// hold the verdict back (the last look's reason stands then).
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if r := a.check(final, true); final.Err() == nil {
				last = r
			}
			cancel()
			return fmt.Errorf("not ready within --ready-timeout %s: %s", a.cfg.ReadyTimeout, last.reason)
		case <-t.C:
		}
	}
}
