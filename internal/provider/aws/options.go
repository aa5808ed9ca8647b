package aws

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/provider"
)

// Region options, as a Fleet's region writes them.
const (
	optRegion          = "region"
	optInstanceTypes   = "instanceTypes"
	optSubnets         = "subnets"
	optSecurityGroups  = "securityGroups"
	optInstanceProfile = "instanceProfile"
	optAMI             = "ami"
	optEndpoint        = "endpoint"
	optTargetGroup     = "targetGroup"
	optSpot            = "spot"
	optHerdUp          = "herdUp"
)

// regionOptions are a region's options, parsed.
type regionOptions struct {
	target
	instanceTypes   []string // in the order to try
	subnets         []string // in the order to try; none: the account's default VPC
	securityGroups  []string
	instanceProfile string // a name or an ARN
	ami             string // "": the AMI tagged with the instance's image digest
	targetGroup     string // an ELBv2 target group's ARN, or ""
	spot            bool   // spot instances first, on-demand when spot has no capacity
	herdUp          string // herd up's API as the instances reach it; "": Options.HerdUp
}

var (
	regionRE       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	instanceTypeRE = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9-]+$`)
	subnetRE       = regexp.MustCompile(`^subnet-[0-9a-f]{8,17}$`)
	groupRE        = regexp.MustCompile(`^sg-[0-9a-f]{8,17}$`)
	amiRE          = regexp.MustCompile(`^ami-[0-9a-f]{8,17}$`)
	profileNameRE  = regexp.MustCompile(`^[\w+=,.@-]{1,128}$`)
	profileArnRE   = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/[\w+=,.@/-]{1,128}$`)
	targetGroupRE  = regexp.MustCompile(`^arn:aws[a-z-]*:elasticloadbalancing:([a-z0-9-]+):[0-9]{12}:targetgroup/[A-Za-z0-9-]{1,32}/[0-9a-f]{16}$`)
)

// ValidateOptions implements provider.OptionsValidator: region and instanceTypes are required;
// each option must have the form EC2 takes, so that a typo is refused at apply, not by
// RunInstances at every attempt.
func (p *Provider) ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList {
	_, errs := parseOptions(path, opts)
	return errs
}

func parseOptions(path *field.Path, opts map[string]string) (regionOptions, field.ErrorList) {
	errs := provider.UnknownOptions(path, opts, Name, optRegion, optInstanceTypes, optSubnets, optSecurityGroups, optInstanceProfile, optAMI, optEndpoint, optTargetGroup, optSpot, optHerdUp)
	var o regionOptions
	o.Region = opts[optRegion]
	switch {
	case o.Region == "":
		errs = append(errs, field.Required(path.Child(optRegion), "the AWS region to run in, such as \"eu-west-1\""))
	case !regionRE.MatchString(o.Region):
		errs = append(errs, field.Invalid(path.Child(optRegion), o.Region, "must be an AWS region such as \"eu-west-1\""))
	}
	o.instanceTypes = splitList(opts[optInstanceTypes])
	if len(o.instanceTypes) == 0 {
		errs = append(errs, field.Required(path.Child(optInstanceTypes), "instance types to try in order, separated by commas, such as \"m7i.large,m6i.large\""))
	}
	each := func(key string, re *regexp.Regexp, want string) []string {
		values := splitList(opts[key])
		for _, v := range values {
			if !re.MatchString(v) {
				errs = append(errs, field.Invalid(path.Child(key), v, "must be "+want+", separated by commas"))
			}
		}
		return values
	}
	each(optInstanceTypes, instanceTypeRE, "EC2 instance types such as \"m7i.large\"")
	o.subnets = each(optSubnets, subnetRE, "subnet IDs such as \"subnet-0123456789abcdef0\"")
	o.securityGroups = each(optSecurityGroups, groupRE, "security group IDs such as \"sg-0123456789abcdef0\"")
	if v, ok := opts[optInstanceProfile]; ok && !profileNameRE.MatchString(v) && !profileArnRE.MatchString(v) {
		errs = append(errs, field.Invalid(path.Child(optInstanceProfile), v, "must be an IAM instance profile's name or ARN"))
	}
	o.instanceProfile = opts[optInstanceProfile]
	if v, ok := opts[optAMI]; ok && !amiRE.MatchString(v) {
		errs = append(errs, field.Invalid(path.Child(optAMI), v, "must be an AMI ID such as \"ami-0123456789abcdef0\", or left out to use the AMI tagged with the image's digest"))
	}
	o.ami = opts[optAMI]
	if v, ok := opts[optHerdUp]; ok {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, field.Invalid(path.Child(optHerdUp), v,
				"must be the http or https URL at which the instances reach herd up's API from their subnets, such as \"https://10.0.0.5:7443\" (docs/aws.md says how)"))
		}
		o.herdUp = v
	}
	if v, ok := opts[optSpot]; ok {
		spot, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(optSpot), v, "must be true (spot instances, on-demand when spot has no capacity) or false"))
		}
		o.spot = spot
	}
	if v, ok := opts[optTargetGroup]; ok {
		m := targetGroupRE.FindStringSubmatch(v)
		switch {
		case m == nil:
			errs = append(errs, field.Invalid(path.Child(optTargetGroup), v,
				"must be an ELBv2 target group's ARN such as \"arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/0123456789abcdef\", or left out"))
		case o.Region != "" && m[1] != o.Region:
			errs = append(errs, field.Invalid(path.Child(optTargetGroup), v,
				fmt.Sprintf("the target group is in %s and the instances in %s: give a target group of the region %s", m[1], o.Region, o.Region)))
		}
		o.targetGroup = v
	}
	if v, ok := opts[optEndpoint]; ok {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(path.Child(optEndpoint), v, "must be an http or https URL of an EC2-compatible API, or left out for AWS's own"))
		}
		o.Endpoint = v
	}
	return o, errs
}

// splitList splits a comma-separated option, leaving out blanks.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// specOptions parses a spec's options for Create, as one error that names every bad option.
func specOptions(spec provider.InstanceSpec) (regionOptions, error) {
	o, errs := parseOptions(field.NewPath("options"), spec.Options)
	if len(errs) > 0 {
		return o, fmt.Errorf("aws: region %s: %w", spec.Region, errs.ToAggregate())
	}
	return o, nil
}
