// Package aws is the provider that runs herd's instances as Amazon EC2 instances, on the AWS SDK
// for Go v2 with its default credential chain (environment, shared profile, web identity,
// instance role).
//
// EC2 is herd's memory: every instance carries tags (its fleet, region, revision and name, the
// image digest it boots, and this herd installation's id), so that a restarted herd up finds and
// adopts what runs, and two installations in one account never see, adopt or delete each other's
// instances. Create is one RunInstances whose ClientToken is derived from the instance's name, so
// that asking again never launches again; the instance types and subnets of a region's options are
// tried in order when EC2 has no capacity. List and Get read snapshots of each EC2 region, one
// paginated DescribeInstances filtered by tags shared by every fleet's list; an instance this provider launched a moment ago and DescribeInstances does
// not show yet (EC2 is eventually consistent) is reported from RunInstances' answer, never as
// missing. Delete tags the instance as deleted, takes it out of its target group (the region's
// targetGroup option; targetgroup.go), terminates it and returns once EC2 says it is terminated. Every call passes a client-side rate limit per region beside the SDK's retries, so
// that herd never spends the account's EC2 request budget in a burst.
package aws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"golang.org/x/time/rate"

	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider"
)

// Name is the provider name regions use.
const Name = "aws"

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.OptionsValidator = (*Provider)(nil)
)

// ec2API is every EC2 action the provider calls: the IAM policy in docs/aws.md allows exactly
// these, and a test keeps the two in step.
type ec2API interface {
	RunInstances(context.Context, *ec2.RunInstancesInput, ...func(*ec2.Options)) (*ec2.RunInstancesOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
}

// Options configure the provider.
type Options struct {
	// Installation identifies this herd installation in the account. It is written on every
	// instance, and only instances that carry it are listed, adopted or deleted. Required.
	Installation string
	// Credentials, when set, replace the SDK's default credential chain.
	Credentials aws.CredentialsProvider
	// StateDir, when set, keeps the EC2 regions and endpoints the provider launched in, so that a
	// restarted herd up lists their instances before it launches anything.
	StateDir string
	// RateLimit bounds the calls per second to each EC2 region (with bursts of RateBurst).
	// Default: 5 per second, bursts of 10, well inside EC2's default account limits.
	RateLimit rate.Limit
	RateBurst int
	// MaxAttempts is how many times the SDK tries a call that is throttled or fails on EC2's side.
	// Default: 8.
	MaxAttempts int
	// MaxBackoff caps the SDK's backoff between attempts. Default: the SDK's (20s).
	MaxBackoff time.Duration
	// PollInterval is how often Delete looks whether its instances terminated. Default: 2s.
	PollInterval time.Duration
	// ListMaxAge is how long a snapshot of an EC2 region's instances (snapshot.go) serves List,
	// Get and Delete while nothing in it moves. Default: 1m.
	ListMaxAge time.Duration
	// ListMaxAgeChanging is how long it serves them while instances boot or terminate, or after
	// this provider launched or deleted one. Default: 2s.
	ListMaxAgeChanging time.Duration
	// ConsistencyGrace is how long an instance this provider launched is reported from
	// RunInstances' answer while DescribeInstances does not show it. Default: 5 minutes.
	ConsistencyGrace time.Duration
	// AMIMaxAge is how long the AMI found for an image digest in a region serves launches before
	// DescribeImages is asked again (a new AMI registered for the digest is found then). Default:
	// 5 minutes.
	AMIMaxAge time.Duration
	// AgentKeys give each instance's agent its credential (internal/agentauth): it is written
	// in the instance's user data with HerdUp and the image's digest, and the provider asks the
	// agent for the instance's readiness with it. Default: none: instances get no user data and
	// are Ready once running (for tests of the provider alone).
	AgentKeys *agentauth.Keyring
	// HerdUp is the URL of herd up's API, written in the instances' user data, for regions
	// whose herdUp option does not say where their instances reach it.
	HerdUp string
	Logger *slog.Logger
	// Now returns the time; default time.Now.
	Now func() time.Time
}

// target is one EC2 API: a region, reached at an endpoint (empty: AWS's own).
type target struct {
	Region   string `json:"region"`
	Endpoint string `json:"endpoint,omitempty"`
}

// launched is what this provider value launched, kept until DescribeInstances shows it.
type launched struct {
	target   target
	id       string
	instance provider.Instance
	at       time.Time
}

// Provider runs instances on EC2.
type Provider struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	clients  map[target]ec2API
	targets  map[target][]string // the herd regions each target serves
	launched map[string]launched // by instance name
	amis     amiCache            // the AMI of each image digest in each target (ami.go)
	snaps    map[target]*snapshots
	batches  map[target]*batches // TerminateInstances and CreateTags of concurrent deletes

	tg targetGroups // the target groups instances serve in (targetgroup.go)
	// forgotten are instances terminated from outside that herd has deleted since (delete.go).
	forgotten forgottenSet

	agents *http.Client // asks the instances' agents for their readiness (bootstrap.go)
}

// New returns a provider.
func New(opts Options) (*Provider, error) {
	if opts.Installation == "" {
		return nil, errors.New("aws: an installation id is required, so that instances of another herd in the account are left alone")
	}
	if opts.RateLimit == 0 {
		opts.RateLimit, opts.RateBurst = 5, 10
	}
	if opts.RateBurst == 0 {
		opts.RateBurst = 1
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 8
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 2 * time.Second
	}
	if opts.ListMaxAge == 0 {
		opts.ListMaxAge = time.Minute
	}
	if opts.ListMaxAgeChanging == 0 {
		opts.ListMaxAgeChanging = 2 * time.Second
	}
	if opts.ConsistencyGrace == 0 {
		opts.ConsistencyGrace = 5 * time.Minute
	}
	if opts.AMIMaxAge == 0 {
		opts.AMIMaxAge = 5 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Provider{
		opts: opts, log: opts.Logger.With("component", "aws-provider"),
		clients: map[target]ec2API{}, targets: map[target][]string{},
		launched: map[string]launched{}, amis: amiCache{found: map[string]foundAMI{}}, snaps: map[target]*snapshots{},
		batches: map[target]*batches{},
		agents:  &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}},
		tg: targetGroups{clients: map[target]elbAPI{}, delays: map[string]time.Duration{},
			registered: map[string]map[string]bool{}, leaving: map[string]bool{}},
	}
	if err := p.loadTargets(); err != nil {
		return nil, err
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider: EC2 instances outlive herd up.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Persistent: true}
}

// remember records that target serves herd region, and keeps it in the state directory.
func (p *Provider) remember(t target, region string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(p.targets[t], region) {
		return nil
	}
	p.targets[t] = append(p.targets[t], region)
	return p.saveTargets()
}

// targetsFor returns the targets that serve herd region, or every target for "".
func (p *Provider) targetsFor(region string) []target {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []target
	for t, regions := range p.targets {
		if region == "" || slices.Contains(regions, region) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b target) int { return compareTargets(a, b) })
	return out
}

func compareTargets(a, b target) int {
	if a.Region != b.Region {
		if a.Region < b.Region {
			return -1
		}
		return 1
	}
	switch {
	case a.Endpoint < b.Endpoint:
		return -1
	case a.Endpoint > b.Endpoint:
		return 1
	}
	return 0
}

type savedTarget struct {
	target
	Regions []string `json:"regions"`
}

func (p *Provider) statePath() string { return filepath.Join(p.opts.StateDir, "targets.json") }

// saveTargets writes the targets; the caller holds p.mu.
func (p *Provider) saveTargets() error {
	if p.opts.StateDir == "" {
		return nil
	}
	var saved []savedTarget
	for t, regions := range p.targets {
		saved = append(saved, savedTarget{t, regions})
	}
	slices.SortFunc(saved, func(a, b savedTarget) int { return compareTargets(a.target, b.target) })
	b, err := json.MarshalIndent(saved, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("aws: keep the regions launched in: %w", err)
	}
	tmp := p.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("aws: keep the regions launched in: %w", err)
	}
	return os.Rename(tmp, p.statePath())
}

func (p *Provider) loadTargets() error {
	if p.opts.StateDir == "" {
		return nil
	}
	b, err := os.ReadFile(p.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aws: read the regions launched in: %w", err)
	}
	var saved []savedTarget
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("aws: %s: %w", p.statePath(), err)
	}
	for _, s := range saved {
		p.targets[s.target] = s.Regions
	}
	return nil
}
