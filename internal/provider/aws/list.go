package aws

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// pageSize is how many instances one DescribeInstances page holds: EC2's largest, so that a
// list costs as few calls as it can.
const pageSize = 1000

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, name string) (provider.Instance, error) {
	if !provider.ValidName(name) {
		return provider.Instance{}, fmt.Errorf("%w: %q is not an instance name", provider.ErrNotFound, name)
	}
	found, err := p.describe(ctx, "", tagInstance, name)
	if err != nil {
		return provider.Instance{}, err
	}
	if len(found) > 0 {
		return found[0], nil
	}
	return provider.Instance{}, fmt.Errorf("%w: %s", provider.ErrNotFound, name)
}

// List implements provider.Provider: the instances of a snapshot of every EC2 region the herd
// region runs in (one paginated DescribeInstances filtered by this installation on EC2's side,
// shared by the lists of every fleet), filtered by fleet, region and labels here.
func (p *Provider) List(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	key, value := "", ""
	if opts.Fleet != "" {
		key, value = v1alpha1.LabelFleet, opts.Fleet
	}
	found, err := p.describe(ctx, opts.Region, key, value)
	if err != nil {
		return nil, err
	}
	out := found[:0]
	for _, in := range found {
		if opts.Matches(in.Labels) {
			out = append(out, in)
		}
	}
	return out, nil
}

// describe lists this installation's instances in the targets of herd region ("" for all) whose
// tag key is value (no filter for key ""), and adds the ones this provider launched that EC2 does
// not show yet. Instances deleted and terminated are left out: they are gone. It reads one
// snapshot per target (snapshot.go), shared by every call of a resync, and filters here. Those
// that serve are registered in their target group, if they have one and are not yet.
func (p *Provider) describe(ctx context.Context, region, key, value string) ([]provider.Instance, error) {
	var out []provider.Instance
	seen := map[string]bool{}
	members := map[string]member{}
	for _, t := range p.targetsFor(region) {
		snap, err := p.fresh(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, ec2in := range snap.instances {
			in, hidden := p.instance(ec2in)
			seen[in.Name] = true
			if !hidden && matches(in, region, key, value) {
				out = append(out, in)
				if arn := tag(ec2in, tagTargetGroup); arn != "" {
					members[in.Name] = member{target: t, arn: arn, id: aws.ToString(ec2in.InstanceId)}
				}
			}
		}
	}
	out = append(out, p.unseen(region, key, value, seen)...)
	p.agentReadiness(ctx, out)
	p.registerServing(ctx, out, members)
	slices.SortFunc(out, func(a, b provider.Instance) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// matches reports whether in is in herd region ("" for any) and has tag key set to value (any
// for key "").
func matches(in provider.Instance, region, key, value string) bool {
	has := in.Labels[key]
	if key == tagInstance {
		has = in.Name
	}
	return (region == "" || in.Region == region) && (key == "" || has == value)
}

// unseen are the instances launched by this provider value that a describe did not show (EC2's
// eventual consistency), within the grace given to it; it forgets the ones it showed.
func (p *Provider) unseen(region, key, value string, seen map[string]bool) []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []provider.Instance
	for name, l := range p.launched {
		if seen[name] || p.opts.Now().Sub(l.at) > p.opts.ConsistencyGrace {
			delete(p.launched, name)
			continue
		}
		if matches(l.instance, region, key, value) {
			out = append(out, l.instance)
		}
	}
	return out
}

// instance is herd's view of an EC2 instance, and whether it is one herd deleted and EC2
// terminated (gone, for herd).
func (p *Provider) instance(ec2in types.Instance) (in provider.Instance, hidden bool) {
	tags := map[string]string{}
	for _, t := range ec2in.Tags {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	labels := map[string]string{}
	for k, v := range tags {
		switch k {
		case tagInstallation, tagInstance, tagImage, tagDeleting, tagName, tagTargetGroup:
		default:
			if !strings.HasPrefix(k, reservedTagNS) {
				labels[k] = v
			}
		}
	}
	id, zone := aws.ToString(ec2in.InstanceId), ""
	if ec2in.Placement != nil {
		zone = aws.ToString(ec2in.Placement.AvailabilityZone)
	}
	in = provider.Instance{
		Name: tags[tagInstance], Labels: labels, Image: tags[tagImage], Region: tags[v1alpha1.LabelRegion],
		ProviderID: "aws:///" + zone + "/" + id, Address: aws.ToString(ec2in.PrivateIpAddress),
		CreatedAt: aws.ToTime(ec2in.LaunchTime),
	}
	state := types.InstanceStateNamePending
	if ec2in.State != nil {
		state = ec2in.State.Name
	}
	deleting := tags[tagDeleting] != ""
	switch {
	case (deleting || p.forgotten.has(id)) && state == types.InstanceStateNameTerminated:
		return in, true
	case deleting:
		in.State = provider.StateDeleting
	case state == types.InstanceStateNamePending:
		in.State = provider.StateBooting
	case state == types.InstanceStateNameRunning:
		in.State = provider.StateReady
	default:
		in.State, in.Reason = provider.StateFailed, failure(id, state, ec2in)
	}
	return in, false
}

// failure is why an instance herd did not delete stopped or went away, in EC2's words.
func failure(id string, state types.InstanceStateName, ec2in types.Instance) string {
	why := aws.ToString(ec2in.StateTransitionReason)
	if ec2in.StateReason != nil && aws.ToString(ec2in.StateReason.Message) != "" {
		why = aws.ToString(ec2in.StateReason.Message)
	}
	if why == "" {
		return fmt.Sprintf("EC2 instance %s is %s", id, state)
	}
	return fmt.Sprintf("EC2 instance %s is %s: %s", id, state, why)
}
