package aws

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
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
	ids := map[target][]string{}
	for _, t := range p.targetsFor("") {
		api, err := p.client(ctx, t)
		if err != nil {
			return err
		}
		found, err := p.liveIDs(ctx, api, name)
		if err != nil {
			return fmt.Errorf("aws: delete %s: %w", name, explain(err))
		}
		ids[t] = append(ids[t], found...)
	}
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
		if err := p.terminate(ctx, api, name, list); err != nil {
			return err
		}
	}
	p.mu.Lock()
	delete(p.launched, name)
	p.mu.Unlock()
	return nil
}

// liveIDs are the IDs of this installation's instances named name that are not terminated.
func (p *Provider) liveIDs(ctx context.Context, api ec2API, name string) ([]string, error) {
	var ids []string
	pages := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + tagInstallation), Values: []string{p.opts.Installation}},
		{Name: aws.String("tag:" + tagInstance), Values: []string{name}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "shutting-down", "stopping", "stopped"}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				ids = append(ids, aws.ToString(in.InstanceId))
			}
		}
	}
	return ids, nil
}

// terminate tags ids as deleted, terminates them and waits until EC2 says they are terminated.
func (p *Provider) terminate(ctx context.Context, api ec2API, name string, ids []string) error {
	fail := func(step string, err error) error {
		if isAny(err, codeNotFound) {
			return fmt.Errorf("aws: delete %s: EC2 does not show instance %v yet (it was launched a moment ago): ask again shortly: %w", name, ids, err)
		}
		return fmt.Errorf("aws: delete %s: %s: %w", name, step, explain(err))
	}
	if _, err := api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: ids, Tags: []types.Tag{{Key: aws.String(tagDeleting), Value: aws.String("true")}}}); err != nil {
		return fail("tag it as deleted", err)
	}
	if _, err := api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids}); err != nil {
		return fail("terminate", err)
	}
	p.log.Info("terminating", "instance", name, "ids", ids)
	for {
		out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: ids})
		if err != nil {
			return fail("wait for termination", err)
		}
		done := true
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				done = done && in.State != nil && in.State.Name == types.InstanceStateNameTerminated
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("aws: delete %s: EC2 has not terminated %v yet: %w", name, ids, ctx.Err())
		case <-time.After(p.opts.PollInterval):
		}
	}
}
