package controlplane

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
)

// runnable is one part of herd up: Start runs it until ctx ends and returns nil then, or returns
// an error that stops the control plane.
type runnable struct {
	name  string
	start func(ctx context.Context) error
}

// manager runs herd up's parts in stages: every stage starts after the ones before it, and on
// stop (ctx ended, or any part failed) the stages stop in reverse, each once the later ones have
// returned. Parts a later stage uses therefore outlive it: the load balancer and the event writer
// stop after the API server and the controller.
type manager struct {
	stages [][]runnable
	// started, when set, is called once every stage has started; stopping when they start to stop.
	started, stopping func()
}

// stage adds a stage of parts started together.
func (m *manager) stage(parts ...runnable) {
	m.stages = append(m.stages, parts)
}

// run starts every stage and blocks until ctx ends or a part fails, then stops them in reverse
// and returns the first failure, named.
func (m *manager) run(ctx context.Context) error {
	failed := make(chan error, 1)
	type started struct {
		stop func()
		g    *errgroup.Group
	}
	var running []started
	for _, parts := range m.stages {
		// A stage's context is not ctx's child: it ends only when the stage's turn to stop comes.
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		g := new(errgroup.Group)
		for _, p := range parts {
			g.Go(func() error {
				err := p.start(sctx)
				if err != nil {
					err = fmt.Errorf("%s: %w", p.name, err)
					select {
					case failed <- err:
					default:
					}
				}
				return err
			})
		}
		running = append(running, started{stop: stop, g: g})
	}
	if m.started != nil {
		m.started()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	if m.stopping != nil {
		m.stopping()
	}
	for i := len(running) - 1; i >= 0; i-- {
		running[i].stop()
		_ = running[i].g.Wait() // the first failure is err; later ones come of stopping
	}
	return err
}
