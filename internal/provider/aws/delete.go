package aws

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/internal/provider"
)

// Delete implements provider.Provider: it tags the instance as deleted (so that, terminated, it is
// gone for herd, where one terminated from outside is Failed), terminates it, and returns once EC2
// says it is terminated. An instance this provider launched that EC2 does not show yet is an
// error to retry, never a success that would leak it.
func (p *Provider) Delete(ctx context.Context, name string) error {
	if !provider.ValidName(name) {
		return nil
	}
	ids, gone := map[target][]string{}, map[target][]string{}
	groups := map[target]map[string][]string{}
	for _, t := range p.targetsFor("") {
		// A snapshot at most ListMaxAgeChanging old, shared by the deletes of a scale-down.
		snap, err := p.takenAfter(ctx, t, p.opts.Now().Add(-p.opts.ListMaxAgeChanging))
		if err != nil {
			return fmt.Errorf("aws: delete %s: %w", name, err)
		}
		ids[t], gone[t] = liveIDs(snap, name), p.goneIDs(snap, name)
		groups[t] = groupsOf(snap, name, ids[t])
	}
	p.forget(ctx, name, gone)
	p.mu.Lock()
	l, recent := p.launched[name]
	p.mu.Unlock()
	if recent && !slices.Contains(ids[l.target], l.id) {
		// Launched, not shown yet: terminate it by ID, which EC2 may refuse until it knows it.
		ids[l.target] = append(ids[l.target], l.id)
	}
	for t, list := range ids {
		if len(list) == 0 {
			continue
		}
		api, err := p.client(ctx, t)
		if err != nil {
			return err
		}
		if err := p.terminate(ctx, api, t, name, list, groups[t]); err != nil {
			return err
		}
	}
	p.mu.Lock()
	delete(p.launched, name)
	p.mu.Unlock()
	return nil
}

// liveIDs are the IDs of the instances named name in snap that are not terminated.
func liveIDs(snap *snapshot, name string) []string {
	var ids []string
	for _, in := range snap.instances {
		if tag(in, tagInstance) == name && (in.State == nil || in.State.Name != types.InstanceStateNameTerminated) {
			ids = append(ids, aws.ToString(in.InstanceId))
		}
	}
	return ids
}

// goneIDs are the IDs of the instances named name in snap that EC2 terminated without herd's
// delete (from outside: the console, a spot reclaim, a failed host).
func (p *Provider) goneIDs(snap *snapshot, name string) []string {
	var ids []string
	for _, in := range snap.instances {
		id := aws.ToString(in.InstanceId)
		if tag(in, tagInstance) == name && tag(in, tagDeleting) == "" && !p.forgotten.has(id) &&
			in.State != nil && in.State.Name == types.InstanceStateNameTerminated {
			ids = append(ids, id)
		}
	}
	return ids
}

// forget makes instances terminated from outside gone for herd once it has deleted them. EC2 lists
// a terminated instance for about an hour: still listed as Failed after its delete, it would be
// an instance with no record that the controller adopts and replaces again, one more launch each
// time. The provider remembers them, at once; it also tags them as deleted, so that a herd
// restarted within the hour forgets them too where EC2 takes tags on a terminated instance, and
// goes on without the tag where it does not.
func (p *Provider) forget(ctx context.Context, name string, gone map[target][]string) {
	for t, ids := range gone {
		if len(ids) == 0 {
			continue
		}
		p.forgotten.add(ids, p.opts.Now())
		api, err := p.client(ctx, t)
		if err == nil {
			err = p.batchesOf(t, api).tagDeleting.do(ctx, ids)
		}
		if err != nil {
			p.log.Debug("terminated instances not tagged as deleted; forgotten by this herd up only", "instance", name, "ids", ids, "error", explain(err))
			continue
		}
		p.changed(t)
	}
}

// forgetFor is how long a forgotten instance is remembered: longer than EC2 lists it.
const forgetFor = 3 * time.Hour

// forgottenSet holds the IDs of instances terminated from outside that herd has deleted.
type forgottenSet struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (f *forgottenSet) add(ids []string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]time.Time{}
	}
	for id, at := range f.at {
		if now.Sub(at) > forgetFor {
			delete(f.at, id)
		}
	}
	for _, id := range ids {
		f.at[id] = now
	}
}

func (f *forgottenSet) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.at[id]
	return ok
}

// tag is the value of the instance's tag key, or "".
func tag(in types.Instance, key string) string {
	for _, t := range in.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// terminate tags ids as deleted, takes them out of their target groups, terminates them (the
// tagging and the termination in one call with the other deletes under way: batch.go) and waits
// until EC2 says they are terminated (in snapshots taken after the termination, shared by the
// deletes of a scale-down, at most one every PollInterval, not in calls of its own) and their
// target groups say they are out.
func (p *Provider) terminate(ctx context.Context, api ec2API, t target, name string, ids []string, groups map[string][]string) error {
	fail := func(step string, err error) error {
		if isAny(err, codeNotFound) {
			return fmt.Errorf("aws: delete %s: EC2 does not show instance %v yet (it was launched a moment ago): ask again shortly: %w", name, ids, err)
		}
		return fmt.Errorf("aws: delete %s: %s: %w", name, step, explain(err))
	}
	b := p.batchesOf(t, api)
	if err := b.tagDeleting.do(ctx, ids); err != nil {
		return fail("tag it as deleted", err)
	}
	for arn, members := range groups {
		if err := p.leaveGroup(ctx, t, name, arn, members); err != nil {
			return err
		}
	}
	if err := b.terminate.do(ctx, ids); err != nil {
		return fail("terminate", err)
	}
	terminated := p.opts.Now()
	p.changed(t)
	p.log.Info("terminating", "instance", name, "ids", ids)
	for since := terminated; ; {
		snap, err := p.takenAfter(ctx, t, since)
		if err != nil {
			return fmt.Errorf("aws: delete %s: wait for termination: %w", name, err)
		}
		if allTerminated(snap, ids) {
			return p.outOfGroups(ctx, t, name, groups)
		}
		since = snap.at.Add(time.Nanosecond) // the next look needs a newer snapshot
		select {
		case <-ctx.Done():
			return fmt.Errorf("aws: delete %s: EC2 has not terminated %v yet: %w", name, ids, ctx.Err())
		case <-time.After(p.opts.PollInterval):
		}
	}
}

// allTerminated reports whether snap shows every instance of ids terminated. One it does not
// show is not: EC2 showed it to TerminateInstances, so a later snapshot will.
func allTerminated(snap *snapshot, ids []string) bool {
	left := len(ids)
	for _, in := range snap.instances {
		if slices.Contains(ids, aws.ToString(in.InstanceId)) && in.State != nil && in.State.Name == types.InstanceStateNameTerminated {
			left--
		}
	}
	return left == 0
}
