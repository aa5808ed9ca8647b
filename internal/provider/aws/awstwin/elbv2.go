package awstwin

// Elastic Load Balancing v2's Query API, for the target groups of ALBs and NLBs: RegisterTargets,
// DeregisterTargets, DescribeTargetHealth, DescribeTargetGroups and DescribeTargetGroupAttributes
// on target groups a test adds (AddTargetGroup), with ELB's refusals: a target group that does
// not exist, an instance that does not exist or does not run, an action the caller may not call.
// A deregistered target drains for the group's deregistration delay, then is unused; a target
// whose instance terminates is deregistered by ELB itself, as AWS does.

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
)

const (
	elbService    = "elasticloadbalancing"
	elbAPIVersion = "2015-12-01"
	elbNamespace  = "http://elasticloadbalancing.amazonaws.com/doc/" + elbAPIVersion + "/"
)

// ELB's target health states and reasons the twin gives.
const (
	TargetHealthy  = "healthy"
	TargetInitial  = "initial"
	TargetDraining = "draining"
	TargetUnused   = "unused"
)

// elbState is the twin's ELB: target groups by ARN, and the calls each action got.
type elbState struct {
	groups map[string]*targetGroup
	calls  map[string]int
	cutOff map[string]bool // instances terminated while a target group still sent them traffic
}

type targetGroup struct {
	arn, name, region string
	port              int
	delay             time.Duration
	targets           map[string]*elbTarget // by instance ID
}

// elbTarget is a registered target, or one draining since deregistered.
type elbTarget struct {
	draining bool
	since    time.Time // when it was deregistered
}

// AddTargetGroup creates a target group of instances on port 80 in region with a deregistration
// delay (in whole seconds, as ELB's attribute holds it), and returns its ARN.
func (tw *Twin) AddTargetGroup(region, name string, delay time.Duration) string {
	delay = delay.Truncate(time.Second)
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.seq++
	arn := fmt.Sprintf("arn:aws:elasticloadbalancing:%s:%s:targetgroup/%s/%016x", region, OwnerID, name, tw.seq)
	if tw.elb.groups == nil {
		tw.elb.groups = map[string]*targetGroup{}
	}
	tw.elb.groups[arn] = &targetGroup{arn: arn, name: name, region: region, port: 80, delay: delay, targets: map[string]*elbTarget{}}
	return arn
}

// Targets returns the state of every target of a target group that is registered or draining, by
// instance ID.
func (tw *Twin) Targets(arn string) map[string]string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	out := map[string]string{}
	if g := tw.elb.groups[arn]; g != nil {
		for _, id := range slices.Sorted(maps.Keys(g.targets)) {
			if state, _ := tw.targetState(g, id); state != TargetUnused {
				out[id] = state
			}
		}
	}
	return out
}

// CutOff returns the instances terminated while a target group still sent them traffic:
// registered, or draining before the group's deregistration delay ended.
func (tw *Twin) CutOff() []string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	for _, g := range tw.elb.groups {
		for id := range g.targets {
			tw.targetState(g, id)
		}
	}
	return slices.Sorted(maps.Keys(tw.elb.cutOff))
}

// ELBCalls returns how many requests each ELB action got, refused ones included.
func (tw *Twin) ELBCalls() map[string]int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return maps.Clone(tw.elb.calls)
}

// ELBClient is an ELBv2 client of the SDK for region that reaches the twin.
func (tw *Twin) ELBClient(region string, optFns ...func(*elasticloadbalancingv2.Options)) *elasticloadbalancingv2.Client {
	return elasticloadbalancingv2.New(elasticloadbalancingv2.Options{
		Region: region, BaseEndpoint: aws.String(tw.URL), Credentials: tw.Credentials(),
	}, optFns...)
}

// signedFor is the service a request's SigV4 credential scope names, or "".
func signedFor(r *http.Request) string {
	_, rest, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	scope, _, _ := strings.Cut(rest, ",")
	if parts := strings.Split(scope, "/"); len(parts) == 5 {
		return parts[3]
	}
	return ""
}

// serveELB answers one call of ELBv2's Query API.
func (tw *Twin) serveELB(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeELBError(w, requestID, errorf(http.StatusBadRequest, "InvalidRequest", "read the request: %v", err))
		return
	}
	region, aerr := tw.authenticate(r, body, elbService)
	if aerr != nil {
		writeELBError(w, requestID, errorf(http.StatusForbidden, "SignatureDoesNotMatch", "%s", aerr.message))
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || r.Method != http.MethodPost {
		writeELBError(w, requestID, errorf(http.StatusBadRequest, "InvalidRequest", "the twin takes form-encoded POSTs of ELB's Query API"))
		return
	}
	if v := form.Get("Version"); v != elbAPIVersion {
		writeELBError(w, requestID, errorf(http.StatusBadRequest, "InvalidParameterValue", "unsupported API version %q: the twin speaks %s", v, elbAPIVersion))
		return
	}
	action := form.Get("Action")
	result, aerr := tw.elbCall(request{action: action, form: form, region: region})
	if aerr != nil {
		writeELBError(w, requestID, aerr)
		return
	}
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	fmt.Fprintf(&buf, "<%sResponse xmlns=%q>", action, elbNamespace)
	if err := xml.NewEncoder(&buf).EncodeElement(result, xml.StartElement{Name: xml.Name{Local: action + "Result"}}); err != nil {
		writeELBError(w, requestID, errorf(http.StatusInternalServerError, "InternalFailure", "encode the answer: %v", err))
		return
	}
	fmt.Fprintf(&buf, "<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>", requestID, action)
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", requestID)
	_, _ = w.Write(buf.Bytes())
}

func writeELBError(w http.ResponseWriter, requestID string, e *apiError) {
	kind := "Sender"
	if e.status >= 500 {
		kind = "Receiver"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.status)
	out, _ := xml.Marshal(route53Error{Namespace: elbNamespace, Type: kind, Code: e.code, Message: e.message, RequestID: requestID})
	_, _ = w.Write(append([]byte(xml.Header), out...))
}

// elbCall counts the call, applies the faults that concern any action and runs it.
func (tw *Twin) elbCall(req request) (any, *apiError) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if tw.elb.calls == nil {
		tw.elb.calls = map[string]int{}
	}
	tw.elb.calls[req.action]++
	if tw.faults.throttle > 0 {
		tw.faults.throttle--
		tw.faults.throttled++
		return nil, errorf(http.StatusBadRequest, "Throttling", "Rate exceeded")
	}
	if tw.faults.denied[req.action] {
		return nil, errorf(http.StatusForbidden, "AccessDenied",
			"User: arn:aws:iam::%s:user/herd is not authorized to perform: %s:%s", OwnerID, elbService, req.action)
	}
	switch req.action {
	case "DescribeTargetGroups":
		return tw.describeTargetGroups(req)
	case "DescribeTargetGroupAttributes":
		g, err := tw.targetGroup(req)
		if err != nil {
			return nil, err
		}
		return &xmlTGAttributes{Attributes: []xmlAttribute{
			{Key: "deregistration_delay.timeout_seconds", Value: strconv.Itoa(int(g.delay / time.Second))},
			{Key: "stickiness.enabled", Value: "false"},
		}}, nil
	case "RegisterTargets":
		return tw.registerTargets(req)
	case "DeregisterTargets":
		return tw.deregisterTargets(req)
	case "DescribeTargetHealth":
		return tw.describeTargetHealth(req)
	case "":
		return nil, errorf(http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action.")
	}
	return nil, errorf(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", req.action)
}

type xmlTargetGroup struct {
	TargetGroupArn  string `xml:"TargetGroupArn"`
	TargetGroupName string `xml:"TargetGroupName"`
	Protocol        string `xml:"Protocol"`
	Port            int    `xml:"Port"`
	VpcID           string `xml:"VpcId"`
	TargetType      string `xml:"TargetType"`
	HealthCheckPath string `xml:"HealthCheckPath"`
}

type xmlTargetGroups struct {
	TargetGroups []xmlTargetGroup `xml:"TargetGroups>member"`
}

type xmlAttribute struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type xmlTGAttributes struct {
	Attributes []xmlAttribute `xml:"Attributes>member"`
}

type xmlTarget struct {
	ID   string `xml:"Id"`
	Port int    `xml:"Port"`
}

type xmlTargetHealth struct {
	Target          xmlTarget `xml:"Target"`
	HealthCheckPort string    `xml:"HealthCheckPort"`
	State           string    `xml:"TargetHealth>State"`
	Reason          string    `xml:"TargetHealth>Reason,omitempty"`
	Description     string    `xml:"TargetHealth>Description,omitempty"`
}

type xmlTargetHealths struct {
	Descriptions []xmlTargetHealth `xml:"TargetHealthDescriptions>member"`
}

type xmlEmpty struct{}

func (tw *Twin) describeTargetGroups(req request) (any, *apiError) {
	arns, names := list(req.form, "TargetGroupArns.member"), list(req.form, "Names.member")
	out := &xmlTargetGroups{}
	for _, arn := range slices.Sorted(maps.Keys(tw.elb.groups)) {
		g := tw.elb.groups[arn]
		if g.region != req.region || len(arns) > 0 && !slices.Contains(arns, arn) || len(names) > 0 && !slices.Contains(names, g.name) {
			continue
		}
		out.TargetGroups = append(out.TargetGroups, xmlTargetGroup{TargetGroupArn: arn, TargetGroupName: g.name,
			Protocol: "HTTP", Port: g.port, VpcID: "vpc-0" + g.region, TargetType: "instance", HealthCheckPath: "/"})
	}
	if len(out.TargetGroups) < len(arns)+len(names) {
		return nil, errorf(http.StatusBadRequest, "TargetGroupNotFound", "One or more target groups not found")
	}
	return out, nil
}

// targetGroup is the request's TargetGroupArn, in the request's region.
func (tw *Twin) targetGroup(req request) (*targetGroup, *apiError) {
	arn := req.form.Get("TargetGroupArn")
	if arn == "" {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at 'targetGroupArn' failed to satisfy constraint: Member must not be null")
	}
	g, ok := tw.elb.groups[arn]
	if !ok || g.region != req.region {
		return nil, errorf(http.StatusBadRequest, "TargetGroupNotFound", "Target groups '%s' not found", arn)
	}
	return g, nil
}

// targetIDs reads Targets.member.N.Id.
func targetIDs(f url.Values) []string {
	var out []string
	for i := 1; ; i++ {
		id := f.Get(fmt.Sprintf("Targets.member.%d.Id", i))
		if id == "" {
			return out
		}
		out = append(out, id)
	}
}

// groupTargets is the request's target group and the IDs of its Targets, which it must give.
func (tw *Twin) groupTargets(req request) (*targetGroup, []string, *apiError) {
	g, err := tw.targetGroup(req)
	if err != nil {
		return nil, nil, err
	}
	ids := targetIDs(req.form)
	if len(ids) == 0 {
		return nil, nil, errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at 'targets' failed to satisfy constraint: Member must not be null")
	}
	return g, ids, nil
}

func (tw *Twin) registerTargets(req request) (any, *apiError) {
	g, ids, err := tw.groupTargets(req)
	if err != nil {
		return nil, err
	}
	now := tw.opts.Now()
	var missing, notRunning []string
	for _, id := range ids {
		in, ok := tw.instances[id]
		if !ok || in.Region != g.region || !tw.visible(in, now) {
			missing = append(missing, "'"+id+"'")
			continue
		}
		tw.advance(in, now)
		if in.State != StateRunning && in.State != StatePending {
			notRunning = append(notRunning, "'"+id+"'")
		}
	}
	switch {
	case len(missing) > 0:
		return nil, errorf(http.StatusBadRequest, "InvalidTarget", "The following instances do not exist: %s", strings.Join(missing, ", "))
	case len(notRunning) > 0:
		return nil, errorf(http.StatusBadRequest, "InvalidTarget", "The following targets are not in a running state and cannot be registered: %s", strings.Join(notRunning, ", "))
	}
	for _, id := range ids {
		g.targets[id] = &elbTarget{} // registering a draining target registers it again
	}
	return &xmlEmpty{}, nil
}

// deregisterTargets starts draining the registered targets named; one not registered is left as
// it is, and the call succeeds, as ELB's does.
func (tw *Twin) deregisterTargets(req request) (any, *apiError) {
	g, ids, err := tw.groupTargets(req)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if t, ok := g.targets[id]; ok && !t.draining {
			t.draining, t.since = true, tw.opts.Now()
		}
	}
	return &xmlEmpty{}, nil
}

func (tw *Twin) describeTargetHealth(req request) (any, *apiError) {
	g, err := tw.targetGroup(req)
	if err != nil {
		return nil, err
	}
	ids := targetIDs(req.form)
	if len(ids) == 0 {
		ids = slices.Sorted(maps.Keys(g.targets))
	}
	out := &xmlTargetHealths{}
	for _, id := range ids {
		state, reason := tw.targetState(g, id)
		if state == TargetUnused && req.form.Get("Targets.member.1.Id") == "" {
			continue // listed only when asked for by ID
		}
		d := xmlTargetHealth{Target: xmlTarget{ID: id, Port: g.port}, HealthCheckPort: strconv.Itoa(g.port), State: state, Reason: reason}
		switch reason {
		case "Target.DeregistrationInProgress":
			d.Description = "Target deregistration is in progress"
		case "Target.NotRegistered":
			d.Description = "Target is not registered to the target group"
		case "Elb.RegistrationInProgress":
			d.Description = "Target registration is in progress"
		}
		out.Descriptions = append(out.Descriptions, d)
	}
	return out, nil
}

// targetState is the state of instance id in g now, and its reason; a draining target whose delay
// ran out is forgotten. The caller holds tw.mu.
func (tw *Twin) targetState(g *targetGroup, id string) (state, reason string) {
	t, ok := g.targets[id]
	if !ok {
		return TargetUnused, "Target.NotRegistered"
	}
	now := tw.opts.Now()
	in := tw.instances[id]
	if in != nil {
		tw.advance(in, now)
	}
	if in != nil && (in.State == StateShuttingDown || in.State == StateTerminated) {
		at := in.StateChanged // when it started shutting down
		if in.State == StateTerminated {
			at = at.Add(-tw.opts.ShutdownDelay)
		}
		if !t.draining || at.Before(t.since.Add(g.delay)) {
			if tw.elb.cutOff == nil {
				tw.elb.cutOff = map[string]bool{}
			}
			tw.elb.cutOff[id] = true
		}
		if !t.draining {
			// ELB deregisters a terminated instance on its own.
			t.draining, t.since = true, at
		}
	}
	switch {
	case t.draining && !now.Before(t.since.Add(g.delay)):
		delete(g.targets, id)
		return TargetUnused, "Target.NotRegistered"
	case t.draining:
		return TargetDraining, "Target.DeregistrationInProgress"
	case in != nil && in.State == StateRunning:
		return TargetHealthy, ""
	}
	return TargetInitial, "Elb.RegistrationInProgress"
}
