package aws

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// A snapshot is one paginated DescribeInstances of every instance of this installation in one
// EC2 region. List, Get and Delete read snapshots instead of asking EC2 each for themselves: the
// controller lists every fleet at each resync, and a call set per fleet (or per instance, for
// Delete's waits) would spend the account's request budget that the account's other users share.
// Calls that arrive while a snapshot is being taken wait for it; a snapshot serves later calls for
// as long as it is fresh enough:
//   - ListMaxAge (default 1m) while nothing moves: every instance of the target running (or at
//     rest, stopped or terminated), nothing launched or deleted since it was taken, and every
//     instance this provider launched shown;
//   - ListMaxAgeChanging (default 2s) otherwise, so that a booting instance is seen running and a
//     terminated one gone about as soon as the controller looks again.
type snapshot struct {
	at        time.Time // when its first call was sent
	instances []types.Instance
	// moving is true when an instance was pending, shutting down or stopping.
	moving bool
}

// snapshots keeps the latest snapshot of one target and the one being taken.
type snapshots struct {
	mu       sync.Mutex
	last     *snapshot
	taking   chan struct{} // closed when the snapshot being taken is done; nil when none is
	takingAt time.Time     // when the snapshot being taken was started
	changed  time.Time     // when this provider last launched or deleted in the target
}

// snapshotsOf returns the snapshots of target t.
func (p *Provider) snapshotsOf(t target) *snapshots {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.snaps[t]
	if !ok {
		s = &snapshots{}
		p.snaps[t] = s
	}
	return s
}

// changed notes that this provider launched or deleted in t: its snapshots are then held to
// ListMaxAgeChanging.
func (p *Provider) changed(t target) {
	s := p.snapshotsOf(t)
	s.mu.Lock()
	s.changed = p.opts.Now()
	s.mu.Unlock()
}

// fresh returns a snapshot of t fresh enough for a call made now: the latest, the one being
// taken, or a new one.
func (p *Provider) fresh(ctx context.Context, t target) (*snapshot, error) {
	s := p.snapshotsOf(t)
	now := p.opts.Now()
	awaited := p.awaitsLaunch(t)
	s.mu.Lock()
	since := now.Add(-p.opts.ListMaxAgeChanging)
	if last := s.last; last != nil && !last.moving && !awaited && s.changed.Before(last.at) {
		since = now.Add(-p.opts.ListMaxAge)
	}
	if s.taking != nil && s.takingAt.Before(since) {
		since = s.takingAt // under way: as fresh as any this call would take
	}
	s.mu.Unlock()
	return p.takenAfter(ctx, t, since)
}

// awaitsLaunch reports whether an instance this provider launched in t has not been seen in a
// snapshot yet (EC2's eventual consistency): the snapshots of t are then changing.
func (p *Provider) awaitsLaunch(t target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.launched {
		if l.target == t {
			return true
		}
	}
	return false
}

// takenAfter returns a snapshot of t whose calls were sent at or after since: the latest, the
// one being taken if it started late enough, else a new one.
func (p *Provider) takenAfter(ctx context.Context, t target, since time.Time) (*snapshot, error) {
	s := p.snapshotsOf(t)
	for {
		s.mu.Lock()
		if s.last != nil && !s.last.at.Before(since) {
			last := s.last
			s.mu.Unlock()
			return last, nil
		}
		if s.taking == nil {
			done, at := make(chan struct{}), p.opts.Now()
			s.taking, s.takingAt = done, at
			s.mu.Unlock()
			snap, err := p.take(ctx, t, at)
			s.mu.Lock()
			s.taking = nil
			if err == nil && (s.last == nil || snap.at.After(s.last.at)) {
				s.last = snap
			}
			s.mu.Unlock()
			close(done)
			if err != nil {
				return nil, err
			}
			if !snap.at.Before(since) {
				return snap, nil
			}
			continue
		}
		taking := s.taking
		s.mu.Unlock()
		// Wait for the snapshot under way, then look again: it serves this call if it started
		// late enough and succeeded; else this call takes its own (and meets its own errors,
		// not those of another caller's context).
		select {
		case <-taking:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// take runs one paginated DescribeInstances of this installation's instances in t.
func (p *Provider) take(ctx context.Context, t target, at time.Time) (*snapshot, error) {
	api, err := p.client(ctx, t)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{at: at}
	pages := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{
		Filters:    []types.Filter{{Name: aws.String("tag:" + tagInstallation), Values: []string{p.opts.Installation}}},
		MaxResults: aws.Int32(pageSize),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("aws: list instances in %s: %w", t.Region, explain(err))
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				snap.instances = append(snap.instances, in)
				if in.State != nil {
					switch in.State.Name {
					case types.InstanceStateNamePending, types.InstanceStateNameShuttingDown, types.InstanceStateNameStopping:
						snap.moving = true
					}
				}
			}
		}
	}
	return snap, nil
}
