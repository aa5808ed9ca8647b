package etcdcluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WaitHealthy waits until each of ms answers a linearizable read, which needs a leader and a
// quorum behind it, or ctx ends. A member whose process exits fails the wait at once, with the
// tail of its log.
func (c *Cluster) WaitHealthy(ctx context.Context, ms ...*Member) error {
	for _, m := range ms {
		if err := c.waitMember(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitMember(ctx context.Context, m *Member) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.ClientURL},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("etcd cluster: member %s: %w", m.Name, err)
	}
	defer cli.Close()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if !c.running(m) {
			return fmt.Errorf("etcd cluster: member %s exited while starting; the end of %s:\n%s", m.Name, m.Log, logTail(m))
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, last = cli.Get(actx, "health")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("etcd cluster: member %s (%s) not healthy: %w (last answer: %v); the end of %s:\n%s",
				m.Name, m.ClientURL, ctx.Err(), last, m.Log, logTail(m))
		}
	}
}
