// Package awstwin is a twin of Amazon EC2 for tests: an HTTP server that speaks EC2's own Query
// protocol (form-encoded POSTs with Action and Version, SigV4-signed, answered with XML in EC2's
// namespace and EC2's error document), so that a client built on aws-sdk-go-v2 reaches it through
// BaseEndpoint and runs its own signing, serialization, retries and error decoding, and so that
// the AWS CLI (`aws --endpoint-url`) can drive it too.
//
// It serves the actions herd's aws provider calls: RunInstances (with ClientToken idempotency),
// DescribeInstances (filters and pagination), TerminateInstances, CreateTags and DescribeImages;
// Route 53's REST-XML API on the same server (route53.go): ChangeResourceRecordSets,
// ListResourceRecordSets and GetChange on hosted zones a test adds; ELBv2's target groups
// (elbv2.go): RegisterTargets, DeregisterTargets, DescribeTargetHealth, DescribeTargetGroups and
// DescribeTargetGroupAttributes, with each group's deregistration delay; and what herd image push
// calls: the EBS direct APIs (ebs.go: StartSnapshot, PutSnapshotBlock with each block's SHA-256
// checked, CompleteSnapshot with the aggregated checksum, ListSnapshotBlocks, GetSnapshotBlock;
// REST-JSON under /snapshots, signed for "ebs") and EC2's RegisterImage, CopyImage,
// DeregisterImage, DescribeSnapshots and DeleteSnapshot (images.go).
// Instances are records kept in memory per region (the region of the request's signature, as in
// EC2, where each region is its own endpoint); they move from pending to running and from
// shutting-down to terminated after configurable delays.
//
// Faults are injected on request, the ones EC2's users meet: no capacity for an instance type or
// in a subnet, an instance type unsupported, throttling (the next calls, or beyond a token bucket
// per region as EC2 does), DescribeInstances lagging behind launches
// (eventual consistency), an instance stopped or terminated from outside, an action the caller's
// IAM policy does not allow.
package awstwin

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// EC2 instance states.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

// Credentials the twin accepts unless Options say otherwise.
const (
	DefaultAccessKeyID     = "AKIDHERDTWIN"
	DefaultSecretAccessKey = "herd-twin-secret"
)

// OwnerID is the account that owns every reservation and image of the twin.
const OwnerID = "123456789012"

// Options configure a twin.
type Options struct {
	// AccessKeyID and SecretAccessKey are the only credentials the twin accepts: a request signed
	// with others is refused with AuthFailure, as EC2 does. Default: DefaultAccessKeyID and
	// DefaultSecretAccessKey.
	AccessKeyID, SecretAccessKey string
	// PendingDelay is how long a new instance stays pending before it runs. Default: 0.
	PendingDelay time.Duration
	// ShutdownDelay is how long a terminated instance stays shutting-down (and a stopped one
	// stopping). Default: 0.
	ShutdownDelay time.Duration
	// Now returns the time; default time.Now.
	Now func() time.Time
	// Backend, when set, runs the instances (backend.go). Default: none, instances are records.
	Backend Backend
}

// Instance is the twin's record of an EC2 instance. Tests read copies of it (Twin.Instances).
type Instance struct {
	ID, ReservationID, Region           string
	ImageID, InstanceType               string
	SubnetID, VpcID, AvailabilityZone   string
	PrivateIP                           string
	SecurityGroups                      []string
	InstanceProfile                     string
	ClientToken                         string
	Lifecycle                           string // "spot", or "" for on-demand
	UserData                            string
	Tags                                map[string]string
	LaunchTime                          time.Time
	State                               string
	StateChanged                        time.Time
	StateReasonCode, StateReasonMessage string
	TransitionReason                    string
}

// PrivateDNSName is the instance's name in the VPC's DNS, made from its address as EC2 does.
func (in *Instance) PrivateDNSName() string {
	if in.PrivateIP == "" {
		return ""
	}
	var a, b, c, d int
	_, _ = fmt.Sscanf(in.PrivateIP, "%d.%d.%d.%d", &a, &b, &c, &d)
	return fmt.Sprintf("ip-%d-%d-%d-%d.%s.compute.internal", a, b, c, d, in.Region)
}

type instance = Instance

// Image is an AMI the twin knows (Twin.AddImage, RegisterImage, CopyImage).
type Image struct {
	ID, Region, Name string
	Tags             map[string]string
	// What RegisterImage and CopyImage set (images.go); AddImage's images leave them empty.
	Registration
}

// launch is what a ClientToken was used for: EC2 answers a repeated token with the same
// reservation, and refuses the token with other parameters.
type launch struct {
	params      string
	reservation string
	instanceID  string
}

// Twin is a running EC2 twin. Its methods are safe for concurrent use.
type Twin struct {
	// URL is the endpoint to give the SDK (BaseEndpoint) or the CLI (--endpoint-url).
	URL string

	opts Options
	srv  *httptest.Server

	mu        sync.Mutex
	instances map[string]*instance // by ID
	order     []string             // instance IDs in launch order, for stable pagination
	images    map[string]*Image
	tokens    map[string]*launch // region + "/" + ClientToken
	seq       uint64
	calls     map[string]int
	faults    faults
	limit     rate.Limit               // RateLimit's; 0: none
	burst     int                      // RateLimit's
	buckets   map[string]*rate.Limiter // by region

	ebs      ebsState        // snapshots of the EBS direct APIs (ebs.go)
	md       metadata        // each instance's metadata service (imds.go)
	tornDown map[string]bool // instances torn down on the Backend, by ID

	r53 route53State // Route 53's hosted zones and changes (route53.go)
	elb elbState     // ELBv2's target groups (elbv2.go)
}

// faults are the failures injected on request.
type faults struct {
	noCapacity  []capacityFault
	unsupported map[string]bool // instance types
	throttle    int             // next calls answered with RequestLimitExceeded
	throttled   int             // calls answered with RequestLimitExceeded so far
	lag         time.Duration   // a new instance is invisible to Describe and lookups by ID this long
	denied      map[string]bool // actions refused with UnauthorizedOperation
	noSpot      bool            // spot launches refused for want of capacity (spot.go)
}

type capacityFault struct{ instanceType, subnetID string }

// New starts a twin; it stops when the test ends.
func New(t interface{ Cleanup(func()) }, opts Options) *Twin {
	if opts.AccessKeyID == "" {
		opts.AccessKeyID, opts.SecretAccessKey = DefaultAccessKeyID, DefaultSecretAccessKey
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	tw := &Twin{
		opts:      opts,
		instances: map[string]*instance{},
		images:    map[string]*Image{},
		tokens:    map[string]*launch{},
		calls:     map[string]int{},
		faults:    faults{unsupported: map[string]bool{}, denied: map[string]bool{}},
		ebs:       ebsState{snapshots: map[string]*Snapshot{}, tokens: map[string]string{}, completedAt: map[string]time.Time{}},
	}
	tw.srv = httptest.NewServer(tw)
	tw.URL = tw.srv.URL
	t.Cleanup(tw.srv.Close)
	t.Cleanup(tw.closeMetadata)
	return tw
}

// NoCapacity makes RunInstances fail with InsufficientInstanceCapacity for instanceType in
// subnetID; an empty one matches any.
func (tw *Twin) NoCapacity(instanceType, subnetID string) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.noCapacity = append(tw.faults.noCapacity, capacityFault{instanceType, subnetID})
}

// RestoreCapacity undoes every NoCapacity.
func (tw *Twin) RestoreCapacity() {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.noCapacity = nil
}

// Unsupported makes RunInstances fail with Unsupported for instanceType.
func (tw *Twin) Unsupported(instanceType string) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.unsupported[instanceType] = true
}

// Throttle answers the next n calls, whatever their action, with RequestLimitExceeded.
func (tw *Twin) Throttle(n int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.throttle = n
}

// Throttled is how many calls were answered with RequestLimitExceeded.
func (tw *Twin) Throttled() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return tw.faults.throttled
}

// Lag makes an instance invisible for d after its launch: DescribeInstances leaves it out and
// lookups by its ID fail with InvalidInstanceID.NotFound, as EC2's eventual consistency does.
func (tw *Twin) Lag(d time.Duration) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.lag = d
}

// Deny refuses action (e.g. "TerminateInstances") with UnauthorizedOperation, as EC2 does for a
// caller whose IAM policy does not allow it.
func (tw *Twin) Deny(action string) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.faults.denied[action] = true
}

// TerminateFromOutside terminates instance id the way something other than its owner does (the
// console, a spot reclaim, a failed host), with EC2's state reason code and message.
func (tw *Twin) TerminateFromOutside(id, code, message string) error {
	return tw.transition(id, StateShuttingDown, code, message)
}

// StopFromOutside stops instance id from outside, with EC2's state reason code and message.
func (tw *Twin) StopFromOutside(id, code, message string) error {
	return tw.transition(id, StateStopping, code, message)
}

func (tw *Twin) transition(id, state, code, message string) error {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	in, ok := tw.instances[id]
	if !ok {
		return fmt.Errorf("no instance %s", id)
	}
	tw.setState(in, state, code, message)
	return nil
}

// AddImage registers an AMI in region and returns its ID.
func (tw *Twin) AddImage(region, name string, tags map[string]string) string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.seq++
	id := fmt.Sprintf("ami-%017x", tw.seq)
	tw.images[id] = &Image{ID: id, Region: region, Name: name, Tags: maps.Clone(tags)}
	return id
}

// Instances returns copies of every instance the twin has, in launch order, terminated included.
func (tw *Twin) Instances() []Instance {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	now := tw.opts.Now()
	out := make([]Instance, 0, len(tw.order))
	for _, id := range tw.order {
		in := tw.instances[id]
		tw.advance(in, now)
		c := *in
		c.Tags = maps.Clone(in.Tags)
		c.SecurityGroups = slices.Clone(in.SecurityGroups)
		out = append(out, c)
	}
	return out
}

// Calls returns how many requests each action got, refused ones included.
func (tw *Twin) Calls() map[string]int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return maps.Clone(tw.calls)
}

// setState moves in to state now; the caller holds tw.mu.
func (tw *Twin) setState(in *instance, state, code, message string) {
	now := tw.opts.Now()
	in.State, in.StateChanged = state, now
	in.StateReasonCode, in.StateReasonMessage = code, message
	tw.terminateOnBackend(in)
	switch state {
	case StateShuttingDown, StateStopping:
		in.TransitionReason = fmt.Sprintf("%s (%s)", reasonPrefix(code), now.UTC().Format("2006-01-02 15:04:05 MST"))
	}
}

func reasonPrefix(code string) string {
	if code == "Client.UserInitiatedShutdown" {
		return "User initiated"
	}
	return "Service initiated"
}

// advance moves in along the states its delays have run out for; the caller holds tw.mu.
func (tw *Twin) advance(in *instance, now time.Time) {
	for {
		switch {
		case in.State == StatePending && !now.Before(in.StateChanged.Add(tw.opts.PendingDelay)):
			in.State, in.StateChanged, in.StateReasonCode, in.StateReasonMessage = StateRunning, in.StateChanged.Add(tw.opts.PendingDelay), "", ""
		case in.State == StateShuttingDown && !now.Before(in.StateChanged.Add(tw.opts.ShutdownDelay)):
			in.State, in.StateChanged, in.PrivateIP = StateTerminated, in.StateChanged.Add(tw.opts.ShutdownDelay), ""
		case in.State == StateStopping && !now.Before(in.StateChanged.Add(tw.opts.ShutdownDelay)):
			in.State, in.StateChanged = StateStopped, in.StateChanged.Add(tw.opts.ShutdownDelay)
		default:
			return
		}
	}
}

// visible reports whether DescribeInstances and lookups by ID see in yet; the caller holds tw.mu.
func (tw *Twin) visible(in *instance, now time.Time) bool {
	return !now.Before(in.LaunchTime.Add(tw.faults.lag))
}
