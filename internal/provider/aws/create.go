package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// Tags herd writes on its instances beside their labels.
const (
	tagInstallation = "herd.dev/installation"
	tagInstance     = "herd.dev/instance"
	tagImage        = "herd.dev/image" // also on the AMI that boots an image digest
	tagDeleting     = "herd.dev/deleting"
	tagName         = "Name" // what the EC2 console shows
)

// spotNoCapacity are EC2's answers to a spot launch that on-demand capacity may still serve.
var spotNoCapacity = []string{"MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "InsufficientCapacity"}

// EC2's limits on tags.
const (
	maxTags       = 50
	maxTagKey     = 128
	maxTagValue   = 256
	reservedTagNS = "aws:"
)

// Create implements provider.Provider: one RunInstances whose ClientToken is derived from the
// instance's name and this installation, so that asking again (after a crash, a timeout, a lost
// answer) returns the instance launched the first time. When EC2 has no capacity for an instance
// type in a subnet, the next subnet and then the next type are tried, always in the same order,
// so that a repeated ask meets the launch that succeeded.
func (p *Provider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	if err := provider.ValidateSpec(spec); err != nil {
		return provider.Instance{}, err
	}
	o, err := specOptions(spec)
	if err != nil {
		return provider.Instance{}, err
	}
	if in, ok := p.recent(spec.Name); ok {
		return in, nil
	}
	tags, err := p.tags(spec, o)
	if err != nil {
		return provider.Instance{}, err
	}
	if err := p.remember(o.target, spec.Region); err != nil {
		return provider.Instance{}, err
	}
	api, err := p.client(ctx, o.target)
	if err != nil {
		return provider.Instance{}, err
	}
	ami, err := p.ami(ctx, api, o, spec.Image)
	if err != nil {
		return provider.Instance{}, err
	}
	if o.targetGroup != "" {
		// A target group that does not exist or takes no instances is refused before any launch.
		if _, err := p.groupDelay(ctx, o.target, o.targetGroup); err != nil {
			return provider.Instance{}, fmt.Errorf("aws: launch %s: %w", spec.Name, err)
		}
	}
	in, err := p.launch(ctx, api, o, spec, ami, tags)
	if isAny(err, codeAMINotFound) && o.ami == "" {
		// The AMI found for the digest was deregistered since: look for the image's AMI again.
		p.forgetAMI(o.target, spec.Image)
		if ami, err = p.ami(ctx, api, o, spec.Image); err != nil {
			return provider.Instance{}, err
		}
		in, err = p.launch(ctx, api, o, spec, ami, tags)
	}
	return in, err
}

// launch runs the instance of spec from ami, trying the region's instance types and subnets in
// order while EC2 has no capacity: as spot instances first with the spot option, then on-demand.
func (p *Provider) launch(ctx context.Context, api ec2API, o regionOptions, spec provider.InstanceSpec, ami string, tags map[string]string) (provider.Instance, error) {
	token := p.clientToken(spec.Name)
	var tried []string
	markets := []bool{false}
	if o.spot {
		markets = []bool{true, false} // spot wherever it has capacity, then on-demand
	}
	for _, spot := range markets {
		for _, it := range o.instanceTypes {
			for _, subnet := range subnetOrder(o.subnets, spec.Name) {
				in := runInput(o, ami, it, subnet, token, tags)
				in.UserData = p.userData(spec, o)
				if spot {
					in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot,
						SpotOptions: &types.SpotMarketOptions{SpotInstanceType: types.SpotInstanceTypeOneTime,
							InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate}}
				}
				out, err := api.RunInstances(ctx, in)
				switch {
				case err == nil:
					return p.launchedNow(o.target, out.Instances[0])
				case isAny(err, codeNoCapacity, codeUnsupported) || spot && isAny(err, spotNoCapacity...):
					choice := strings.TrimSuffix(it+" in "+subnet, " in ")
					if spot {
						choice = "spot " + choice
					}
					p.log.Info("no capacity, trying the next choice", "instance", spec.Name, "choice", choice, "code", errorCode(err))
					tried = append(tried, choice)
					continue
				case isAny(err, codeTokenMismatch):
					// This token launched before with other choices (another type, subnet or
					// market, taken when this one had no capacity): that instance is the one.
					return p.byToken(ctx, api, o.target, spec.Name, token)
				}
				return provider.Instance{}, fmt.Errorf("aws: launch %s: %w", spec.Name, explain(err))
			}
		}
	}
	return provider.Instance{}, fmt.Errorf("aws: launch %s: EC2 has no capacity for %s: add instance types or subnets to the region's options, or retry later",
		spec.Name, strings.Join(tried, ", "))
}

// clientToken is the ClientToken of an instance's launch: the same for every ask of one name in
// one installation, and at most 64 characters as EC2 wants.
func (p *Provider) clientToken(name string) string {
	sum := sha256.Sum256([]byte(p.opts.Installation + "\x00" + name))
	return "herd-" + hex.EncodeToString(sum[:])[:48]
}

// subnetOrder starts at a subnet chosen by the name, so that a fleet's instances spread across
// subnets (and their zones), and goes round from there. No subnet: one launch in the default VPC.
func subnetOrder(subnets []string, name string) []string {
	if len(subnets) == 0 {
		return []string{""}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	start := int(h.Sum32() % uint32(len(subnets)))
	return append(append([]string{}, subnets[start:]...), subnets[:start]...)
}

func runInput(o regionOptions, ami, instanceType, subnet, token string, tags map[string]string) *ec2.RunInstancesInput {
	in := &ec2.RunInstancesInput{
		ImageId: aws.String(ami), InstanceType: types.InstanceType(instanceType),
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ClientToken: aws.String(token),
		SecurityGroupIds: o.securityGroups,
		TagSpecifications: []types.TagSpecification{{
			ResourceType: types.ResourceTypeInstance, Tags: ec2Tags(tags),
		}},
	}
	if subnet != "" {
		in.SubnetId = aws.String(subnet)
	}
	switch {
	case strings.HasPrefix(o.instanceProfile, "arn:"):
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(o.instanceProfile)}
	case o.instanceProfile != "":
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(o.instanceProfile)}
	}
	return in
}

// tags are the instance's tags: its labels, its name, its image, its region, its target group and
// this installation, checked against EC2's limits so that a label too long is refused here, naming it.
func (p *Provider) tags(spec provider.InstanceSpec, o regionOptions) (map[string]string, error) {
	tags := maps.Clone(spec.Labels)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[v1alpha1.LabelRegion] = spec.Region
	tags[tagInstallation] = p.opts.Installation
	tags[tagInstance] = spec.Name
	tags[tagImage] = spec.Image
	tags[tagName] = spec.Name
	if o.targetGroup != "" {
		tags[tagTargetGroup] = o.targetGroup
	}
	if len(tags) > maxTags {
		return nil, fmt.Errorf("aws: instance %s: %d labels and herd's tags exceed EC2's %d tags: drop labels", spec.Name, len(tags), maxTags)
	}
	for k, v := range tags {
		if len(k) > maxTagKey || len(v) > maxTagValue || strings.HasPrefix(strings.ToLower(k), reservedTagNS) {
			return nil, fmt.Errorf("aws: instance %s: label %q cannot be an EC2 tag (keys up to %d characters, values up to %d, no %q prefix): shorten or rename it",
				spec.Name, k, maxTagKey, maxTagValue, reservedTagNS)
		}
	}
	return tags, nil
}

func ec2Tags(tags map[string]string) []types.Tag {
	out := make([]types.Tag, 0, len(tags))
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

// launchedNow keeps what RunInstances answered, for as long as DescribeInstances may not show it.
func (p *Provider) launchedNow(t target, ec2in types.Instance) (provider.Instance, error) {
	in, hidden := p.instance(ec2in)
	if hidden {
		return provider.Instance{}, fmt.Errorf("aws: instance %s was deleted and its name is spent: an instance name is never reused", in.Name)
	}
	p.mu.Lock()
	p.launched[in.Name] = launched{target: t, instance: in, id: aws.ToString(ec2in.InstanceId), at: p.opts.Now()}
	p.mu.Unlock()
	p.changed(t)
	return in, nil
}

// recent is the instance this provider value launched under name, if it did.
func (p *Provider) recent(name string) (provider.Instance, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.launched[name]
	return l.instance, ok
}

// byToken finds the instance an earlier launch with token made. DescribeInstances may not show
// it yet; then the caller is told to ask again, and nothing is launched.
func (p *Provider) byToken(ctx context.Context, api ec2API, t target, name, token string) (provider.Instance, error) {
	out, err := api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
		{Name: aws.String("client-token"), Values: []string{token}},
		{Name: aws.String("tag:" + tagInstallation), Values: []string{p.opts.Installation}},
	}})
	if err != nil {
		return provider.Instance{}, fmt.Errorf("aws: find the instance launched as %s: %w", name, explain(err))
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			return p.launchedNow(t, in)
		}
	}
	return provider.Instance{}, errors.New("aws: " + name + " was launched with other choices and EC2 does not show it yet: ask again shortly")
}
