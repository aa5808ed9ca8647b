package aws

// Target groups: with a region's targetGroup option, an ALB's or NLB's target group carries the
// region's instances beside herd's own load balancer. An instance is registered once it serves
// (Ready, as its agent says), and deregistered before it is terminated: Delete waits until the
// group says it is out (its deregistration delay drains its connections) before it terminates
// it, and returns only once it is out. The instance's group is a tag of its own, so that a
// restarted herd up finishes a delete that a crash interrupted between the two steps.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
	"golang.org/x/time/rate"

	"herd.dev/herd/internal/awsbody"
	"herd.dev/herd/internal/provider"
)

// tagTargetGroup names the target group an instance is registered in.
const tagTargetGroup = "herd.dev/target-group"

// delayAttribute is the target group attribute that holds its deregistration delay.
const delayAttribute = "deregistration_delay.timeout_seconds"

// codeGroupNotFound is ELB's answer about a target group that does not exist.
const codeGroupNotFound = "TargetGroupNotFound"

// errGroupGone says a target group does not exist (any more).
var errGroupGone = errors.New("no such target group")

// elbAPI is every ELBv2 action the provider calls: the IAM policy in docs/aws.md allows exactly
// these, and a test keeps the two in step.
type elbAPI interface {
	DescribeTargetGroups(context.Context, *elb.DescribeTargetGroupsInput, ...func(*elb.Options)) (*elb.DescribeTargetGroupsOutput, error)
	DescribeTargetGroupAttributes(context.Context, *elb.DescribeTargetGroupAttributesInput, ...func(*elb.Options)) (*elb.DescribeTargetGroupAttributesOutput, error)
	DescribeTargetHealth(context.Context, *elb.DescribeTargetHealthInput, ...func(*elb.Options)) (*elb.DescribeTargetHealthOutput, error)
	RegisterTargets(context.Context, *elb.RegisterTargetsInput, ...func(*elb.Options)) (*elb.RegisterTargetsOutput, error)
	DeregisterTargets(context.Context, *elb.DeregisterTargetsInput, ...func(*elb.Options)) (*elb.DeregisterTargetsOutput, error)
}

// targetGroups is what the provider knows of the target groups it registers in.
type targetGroups struct {
	// mu orders registrations and deregistrations, so that an instance being deleted is never
	// registered again by a list that saw it serving a moment before.
	mu         sync.Mutex
	clients    map[target]elbAPI
	delays     map[string]time.Duration   // by ARN, once checked
	registered map[string]map[string]bool // ARN -> instance IDs registered by this provider value
	leaving    map[string]bool            // instance IDs being deleted
}

// elbClient returns the ELBv2 API of target, made on first use, with a rate limit of its own
// (ELB's request budget is not EC2's).
func (p *Provider) elbClient(ctx context.Context, t target) (elbAPI, error) {
	p.tg.mu.Lock()
	defer p.tg.mu.Unlock()
	if c, ok := p.tg.clients[t]; ok {
		return c, nil
	}
	cfg, err := p.sdkConfig(ctx, t)
	if err != nil {
		return nil, err
	}
	limiter := rate.NewLimiter(p.opts.RateLimit, p.opts.RateBurst)
	c := elb.NewFromConfig(cfg, func(o *elb.Options) {
		if t.Endpoint != "" {
			o.BaseEndpoint = aws.String(t.Endpoint)
		}
		o.APIOptions = append(o.APIOptions, rateLimit(limiter))
		o.HTTPClient = awsbody.Wrap(o.HTTPClient)
	})
	p.tg.clients[t] = c
	return c, nil
}

// sdkConfig is the SDK's configuration for target: its region, the provider's retryer and
// credentials.
func (p *Provider) sdkConfig(ctx context.Context, t target) (aws.Config, error) {
	loads := []func(*config.LoadOptions) error{config.WithRegion(t.Region), config.WithRetryer(p.retryer)}
	if p.opts.Credentials != nil {
		loads = append(loads, config.WithCredentialsProvider(p.opts.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return cfg, fmt.Errorf("aws: load the AWS configuration for %s: %w", t.Region, err)
	}
	return cfg, nil
}

// groupDelay checks that the target group exists and takes instances, and returns its
// deregistration delay; both are asked once per group.
func (p *Provider) groupDelay(ctx context.Context, t target, arn string) (time.Duration, error) {
	p.tg.mu.Lock()
	d, ok := p.tg.delays[arn]
	p.tg.mu.Unlock()
	if ok {
		return d, nil
	}
	api, err := p.elbClient(ctx, t)
	if err != nil {
		return 0, err
	}
	groups, err := api.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{TargetGroupArns: []string{arn}})
	switch {
	case errorCode(err) == codeGroupNotFound || err == nil && len(groups.TargetGroups) != 1:
		return 0, fmt.Errorf("aws: target group %s does not exist in %s: create it, or correct the region's targetGroup option: %w", arn, t.Region, errGroupGone)
	case err != nil:
		return 0, fmt.Errorf("aws: look up target group %s: %w", arn, explain(err))
	case groups.TargetGroups[0].TargetType != elbtypes.TargetTypeEnumInstance:
		return 0, fmt.Errorf("aws: target group %s takes targets of type %s: herd registers instances, so give the region a target group of type instance",
			arn, groups.TargetGroups[0].TargetType)
	}
	attrs, err := api.DescribeTargetGroupAttributes(ctx, &elb.DescribeTargetGroupAttributesInput{TargetGroupArn: aws.String(arn)})
	if err != nil {
		return 0, fmt.Errorf("aws: read the deregistration delay of target group %s: %w", arn, explain(err))
	}
	d = 300 * time.Second // ELB's default
	for _, a := range attrs.Attributes {
		if aws.ToString(a.Key) == delayAttribute {
			if s, err := strconv.Atoi(aws.ToString(a.Value)); err == nil {
				d = time.Duration(s) * time.Second
			}
		}
	}
	p.tg.mu.Lock()
	p.tg.delays[arn] = d
	p.tg.mu.Unlock()
	return d, nil
}

// member is an instance of a snapshot that belongs in a target group.
type member struct {
	target target
	arn    string
	id     string
}

// registerServing keeps the target groups in step with what the instances of ins say: it
// registers those that serve and are not registered yet, and deregisters those registered that
// stopped serving (their agent not ready, failed or stopping), one call per group for each, so
// that AWS's load balancer sends nothing to an instance herd's own would not; one that serves
// again is registered again. An instance whose registration fails is Booting, with the reason,
// until it succeeds: it does not serve where the user asked it to.
func (p *Provider) registerServing(ctx context.Context, ins []provider.Instance, members map[string]member) {
	type group struct {
		target target
		arn    string
	}
	todo := map[group][]int{}
	off := map[group][]string{}
	p.tg.mu.Lock()
	for i, in := range ins {
		m, ok := members[in.Name]
		switch {
		case !ok:
		case in.State == provider.StateReady && !p.tg.registered[m.arn][m.id]:
			todo[group{m.target, m.arn}] = append(todo[group{m.target, m.arn}], i)
		case in.State != provider.StateReady && p.tg.registered[m.arn][m.id] && !p.tg.leaving[m.id]:
			off[group{m.target, m.arn}] = append(off[group{m.target, m.arn}], m.id)
		}
	}
	p.tg.mu.Unlock()
	for g, ids := range off {
		if err := p.deregister(ctx, g.target, g.arn, ids); err != nil {
			p.log.Warn("take instances that stopped serving out of their target group", "targetGroup", g.arn, "ids", ids, "err", err)
		}
	}
	for g, idx := range todo {
		err := p.register(ctx, g.target, g.arn, idx, ins, members)
		if err == nil {
			continue
		}
		for _, i := range idx {
			ins[i].State, ins[i].Reason = provider.StateBooting, err.Error()
		}
	}
}

// deregister takes ids, registered by this provider and no longer serving, out of group arn
// without waiting for the group's deregistration delay: nothing is terminated after it. Those
// that failed stay registered here, so that the next list tries again.
func (p *Provider) deregister(ctx context.Context, t target, arn string, ids []string) error {
	api, err := p.elbClient(ctx, t)
	if err != nil {
		return err
	}
	p.tg.mu.Lock()
	defer p.tg.mu.Unlock()
	targets := make([]elbtypes.TargetDescription, 0, len(ids))
	for _, id := range ids {
		targets = append(targets, elbtypes.TargetDescription{Id: aws.String(id)})
	}
	if _, err := api.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: aws.String(arn), Targets: targets}); err != nil {
		return fmt.Errorf("aws: deregister from target group %s: %w", arn, explain(err))
	}
	for _, id := range ids {
		delete(p.tg.registered[arn], id)
	}
	p.log.Info("deregistered from target group: no longer serving", "targetGroup", arn, "ids", ids)
	return nil
}

// register registers ins[idx] in group arn.
func (p *Provider) register(ctx context.Context, t target, arn string, idx []int, ins []provider.Instance, members map[string]member) error {
	api, err := p.elbClient(ctx, t)
	if err != nil {
		return err
	}
	p.tg.mu.Lock()
	defer p.tg.mu.Unlock()
	var ids []string
	var targets []elbtypes.TargetDescription
	for _, i := range idx {
		id := members[ins[i].Name].id
		if p.tg.leaving[id] {
			continue // being deleted: it stays out
		}
		ids = append(ids, id)
		targets = append(targets, elbtypes.TargetDescription{Id: aws.String(id)})
	}
	if len(targets) == 0 {
		return nil
	}
	if _, err := api.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(arn), Targets: targets}); err != nil {
		return fmt.Errorf("aws: register in target group %s: %w", arn, explain(err))
	}
	if p.tg.registered[arn] == nil {
		p.tg.registered[arn] = map[string]bool{}
	}
	for _, id := range ids {
		p.tg.registered[arn][id] = true
	}
	p.log.Info("registered in target group", "targetGroup", arn, "ids", ids)
	return nil
}

// leaveGroup takes ids out of target group arn before they are terminated: it deregisters those
// the group still has, and waits until the group says they are out or its deregistration delay
// has passed (their connections drained). After a crash it finds them draining and waits again.
func (p *Provider) leaveGroup(ctx context.Context, t target, name, arn string, ids []string) error {
	p.tg.mu.Lock()
	for _, id := range ids {
		p.tg.leaving[id] = true
	}
	p.tg.mu.Unlock()
	delay, err := p.groupDelay(ctx, t, arn)
	if errors.Is(err, errGroupGone) {
		return nil // deleted since: the instance is in no group
	}
	if err != nil {
		return fmt.Errorf("aws: delete %s: %w", name, err)
	}
	api, err := p.elbClient(ctx, t)
	if err != nil {
		return err
	}
	states, err := groupStates(ctx, api, arn, ids)
	if err != nil {
		return fmt.Errorf("aws: delete %s: %w", name, err)
	}
	var in []elbtypes.TargetDescription
	for _, id := range ids {
		if s := states[id]; s != elbtypes.TargetHealthStateEnumUnused && s != elbtypes.TargetHealthStateEnumDraining {
			in = append(in, elbtypes.TargetDescription{Id: aws.String(id)})
		}
	}
	if len(in) > 0 {
		p.tg.mu.Lock()
		_, err := api.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: aws.String(arn), Targets: in})
		for _, id := range ids {
			delete(p.tg.registered[arn], id)
		}
		p.tg.mu.Unlock()
		if err != nil {
			return fmt.Errorf("aws: delete %s: deregister from target group %s: %w", name, arn, explain(err))
		}
		p.log.Info("deregistered from target group, draining", "instance", name, "targetGroup", arn, "delay", delay)
	}
	return p.awaitOut(ctx, api, name, arn, ids, p.opts.Now().Add(delay))
}

// outOfGroups waits until each target group of groups says its instances are out of it.
func (p *Provider) outOfGroups(ctx context.Context, t target, name string, groups map[string][]string) error {
	for arn, ids := range groups {
		api, err := p.elbClient(ctx, t)
		if err != nil {
			return err
		}
		if err := p.awaitOut(ctx, api, name, arn, ids, time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// awaitOut waits until target group arn says ids are out of it, or until deadline (when set).
func (p *Provider) awaitOut(ctx context.Context, api elbAPI, name, arn string, ids []string, deadline time.Time) error {
	for {
		states, err := groupStates(ctx, api, arn, ids)
		if err != nil {
			return fmt.Errorf("aws: delete %s: %w", name, err)
		}
		out := true
		for _, id := range ids {
			out = out && states[id] == elbtypes.TargetHealthStateEnumUnused
		}
		if out || !deadline.IsZero() && !p.opts.Now().Before(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("aws: delete %s: target group %s still has it: %w", name, arn, ctx.Err())
		case <-time.After(p.opts.PollInterval):
		}
	}
}

// groupStates is the state of each of ids in target group arn.
func groupStates(ctx context.Context, api elbAPI, arn string, ids []string) (map[string]elbtypes.TargetHealthStateEnum, error) {
	var targets []elbtypes.TargetDescription
	for _, id := range ids {
		targets = append(targets, elbtypes.TargetDescription{Id: aws.String(id)})
	}
	out, err := api.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn), Targets: targets})
	if errorCode(err) == codeGroupNotFound {
		out, err = &elb.DescribeTargetHealthOutput{}, nil // deleted since: nothing is in it
	}
	if err != nil {
		return nil, fmt.Errorf("ask target group %s for its targets: %w", arn, explain(err))
	}
	states := map[string]elbtypes.TargetHealthStateEnum{}
	for _, d := range out.TargetHealthDescriptions {
		if d.Target != nil && d.TargetHealth != nil {
			states[aws.ToString(d.Target.Id)] = d.TargetHealth.State
		}
	}
	for _, id := range ids {
		if _, ok := states[id]; !ok {
			states[id] = elbtypes.TargetHealthStateEnumUnused
		}
	}
	return states, nil
}

// groupsOf are the target groups of the instances named name in snap, with their IDs.
func groupsOf(snap *snapshot, name string, ids []string) map[string][]string {
	out := map[string][]string{}
	for _, in := range snap.instances {
		id := aws.ToString(in.InstanceId)
		if arn := tag(in, tagTargetGroup); arn != "" && tag(in, tagInstance) == name && slices.Contains(ids, id) {
			out[arn] = append(out[arn], id)
		}
	}
	return out
}
