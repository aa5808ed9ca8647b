// Chaos on a region's link: cut it, or make it slow and lossy, until restored. The actions are
// recorded in the region's network record, so that the next start of the provider undoes them.

package netlab

import (
	"context"
	"fmt"
	"time"
)

// Chaos actions.
const (
	ChaosPartition = "partition"
	ChaosDegrade   = "degrade"
)

// Chaos is a chaos action in force on a region's link.
type Chaos struct {
	// Action is ChaosPartition or ChaosDegrade.
	Action string `json:"action"`
	// Shape is the link's shape while the action lasts.
	Shape Shape     `json:"shape"`
	Since time.Time `json:"since"`
}

// Partition implements regionnet.Chaos. The link relay drops every packet (loss 100%) rather than the
// link going down: the router keeps its addresses and routes, its load balancer keeps its
// listeners, and Restore brings the region back at once.
func (l *Lab) Partition(ctx context.Context, region string) error {
	return l.chaos(ctx, region, &Chaos{Action: ChaosPartition, Shape: Shape{Loss: 1}})
}

// Degrade implements regionnet.Chaos.
func (l *Lab) Degrade(ctx context.Context, region string, latency time.Duration, loss float64) error {
	if latency < 0 || latency > MaxShapeDelay {
		return fmt.Errorf("degrade region %s: latency %s must be between 0 and %s", region, latency, MaxShapeDelay)
	}
	if loss < 0 || loss > 1 || loss != loss {
		return fmt.Errorf("degrade region %s: loss %v must be between 0 and 1 (0%% to 100%%)", region, loss)
	}
	return l.chaos(ctx, region, &Chaos{Action: ChaosDegrade, Shape: Shape{Latency: latency, Loss: loss}})
}

// Restore implements regionnet.Chaos; restoring a region without a chaos action does nothing.
func (l *Lab) Restore(ctx context.Context, region string) error {
	return l.chaos(ctx, region, nil)
}

func (l *Lab) chaos(ctx context.Context, region string, c *Chaos) error {
	if c != nil {
		c.Since = time.Now().UTC().Truncate(time.Millisecond)
	}
	return l.opts.Instances.Lock(func() error {
		rn, err := readRegionNet(l.regionNetDir(region))
		if err != nil {
			return err
		}
		if rn == nil || rn.Phase != netReady {
			if c == nil {
				return nil
			}
			return fmt.Errorf("region %s has no network on this host to %s: create an instance in it first", region, c.Action)
		}
		return l.setChaos(ctx, rn, c)
	})
}

// setChaos records the action (nil: none) and gives the link relay the shape it makes. The
// record is written first: a crash after it leaves an action the next start undoes. The caller
// holds the lock.
func (l *Lab) setChaos(ctx context.Context, rn *regionNet, c *Chaos) error {
	if rn.Chaos == nil && c == nil {
		return nil
	}
	rn.Chaos = c
	if err := writeRegionNet(l.regionNetDir(rn.Region), rn); err != nil {
		return err
	}
	if err := l.syncRelay(rn); err != nil {
		return err
	}
	action := "restore"
	if c != nil {
		action = c.Action
	}
	l.log.Info("region link changed", "region", rn.Region, "action", action, "shape", rn.effectiveShape().String())
	return nil
}

// syncRelay gives the region's relay its link's config now, starting it if it is not running,
// and records it. The caller holds the lock.
func (l *Lab) syncRelay(rn *regionNet) error {
	dir := l.regionNetDir(rn.Region)
	inet, err := l.readInternet()
	if err != nil {
		return err
	}
	if inet == nil {
		return fmt.Errorf("region %s: the internet namespace's record is missing", rn.Region)
	}
	pid, start, err := l.ensureRelay(dir, l.regionLink(rn, inet).cfg, rn.RelayPID, rn.RelayStart)
	if err != nil {
		return fmt.Errorf("region %s: link relay: %w", rn.Region, err)
	}
	if pid != rn.RelayPID || start != rn.RelayStart {
		rn.RelayPID, rn.RelayStart = pid, start
		return writeRegionNet(dir, rn)
	}
	return nil
}
