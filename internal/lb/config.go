package lb

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is the whole desired state of the load balancer. Apply replaces the running state with it
// atomically: either every listener, group and target in it takes effect, or nothing changes.
type Config struct {
	// Listeners are the sockets the load balancer serves, one per fleet listener.
	Listeners []Listener `json:"listeners"`
	// Callers are the instances that may call the listeners, by address, with their fleet: a
	// request's source address tells its fleet to the listeners with AllowFrom (callers.go).
	// Default: none.
	Callers map[netip.Addr]string `json:"callers,omitempty"`
}

// Protocol is what a listener speaks to its clients.
type Protocol string

const (
	// ProtocolHTTP proxies HTTP/1.1 (with keep-alive and WebSocket upgrades) and HTTP/2 (h2c, or h2 over
	// TLS) request by request.
	ProtocolHTTP Protocol = "http"
	// ProtocolTCP proxies each TCP connection as a whole to one target.
	ProtocolTCP Protocol = "tcp"
)

// BackendProtocol is what an HTTP listener speaks to its targets.
type BackendProtocol string

const (
	// BackendHTTP1 sends every request to targets over HTTP/1.1 with keep-alive, whatever the client spoke.
	BackendHTTP1 BackendProtocol = "http1"
	// BackendH2C sends every request to targets over cleartext HTTP/2 with prior knowledge (for gRPC).
	BackendH2C BackendProtocol = "h2c"
)

// PolicyType names a balancing policy: how a target is chosen inside a target group.
type PolicyType string

const (
	// PolicyLeastOutstanding picks the target with the fewest requests in flight (ties rotate).
	PolicyLeastOutstanding PolicyType = "least-outstanding"
	// PolicyRoundRobin picks targets in turn.
	PolicyRoundRobin PolicyType = "round-robin"
	// PolicyWeighted picks targets in proportion to Target.Weight, smoothly interleaved.
	PolicyWeighted PolicyType = "weighted"
	// PolicyStickyCookie sends a client back to the target named by its cookie while that target is healthy;
	// new clients are placed by least outstanding requests and given the cookie.
	PolicyStickyCookie PolicyType = "sticky-cookie"
	// PolicyHeaderHash places requests by a consistent (rendezvous) hash of one request header, so a key
	// stays on its target while that target is healthy; requests without the header use least outstanding.
	PolicyHeaderHash PolicyType = "header-hash"
)

// Listener is one socket of one fleet: where clients connect and which target groups serve them.
type Listener struct {
	// Name identifies the listener across Applies, conventionally "fleet/listener". Required, unique.
	Name string `json:"name"`
	// Fleet is the fleet this listener belongs to; it labels metrics. Required.
	Fleet string `json:"fleet"`
	// Address is the host:port to bind, e.g. "0.0.0.0:80" or "127.0.0.1:0". Required, unique.
	Address string `json:"address"`
	// Protocol is "http" (default) or "tcp".
	Protocol Protocol `json:"protocol,omitempty"`
	// TLS, if set, terminates TLS on the listener with this certificate. Default: none (cleartext).
	TLS *TLS `json:"tls,omitempty"`
	// BackendProtocol is "http1" (default) or "h2c"; HTTP listeners only.
	BackendProtocol BackendProtocol `json:"backendProtocol,omitempty"`
	// Policy chooses a target inside a group. Default: least outstanding requests.
	Policy Policy `json:"policy,omitempty"`
	// GroupPolicy chooses the group of each request: "weighted" (default) shares requests between
	// groups by their weights; "nearest" sends each request to the group whose usable targets are the
	// nearest by measured round-trip time (a global front door's regions), and a retry to the next
	// nearest.
	GroupPolicy GroupPolicy `json:"groupPolicy,omitempty"`
	// HealthCheck configures active and passive health checking. Defaults are stated on each field.
	HealthCheck HealthCheck `json:"healthCheck,omitempty"`
	// Retry bounds retries on another target. Defaults are stated on each field.
	Retry Retry `json:"retry,omitempty"`
	// DrainTimeout is how long a removed target may finish its in-flight requests before its connections
	// are closed. Default 30s.
	DrainTimeout Duration `json:"drainTimeout,omitempty"`
	// Timeouts bound how long clients and targets may take. Defaults are stated on each field.
	Timeouts Timeouts `json:"timeouts,omitempty"`
	// Limits bound what a client may send. Defaults are stated on each field.
	Limits Limits `json:"limits,omitempty"`
	// Hold, when set, makes an HTTP request that finds no healthy target wait for one (a fleet scaled
	// to zero, or its first instance still booting) instead of being answered 503 at once. TCP
	// listeners ignore it. Default: nil, no holding.
	Hold *Hold `json:"hold,omitempty"`
	// Tenancy, when set, routes each request only to the targets of its tenant (tenancy.go).
	// Default: nil, every target serves every request.
	Tenancy *Tenancy `json:"tenancy,omitempty"`
	// AllowFrom, when set, are the only fleets whose instances (Config.Callers) the listener
	// serves: a request from an instance of another fleet gets 403 (HTTP), or its connection is
	// closed (TCP); a client that is no instance is served (callers.go). Default: every fleet.
	AllowFrom []string `json:"allowFrom,omitempty"`
	// Routes, when set, make the listener a host router (hosts.go): it has no groups of its
	// own, and serves each request with the listener of the same config that its Host names;
	// a Host no route names gets 404. Fleet is not required of it. Default: none.
	Routes []HostRoute `json:"routes,omitempty"`
	// Groups are the target groups, one per fleet revision. An empty list serves 503 to every request.
	Groups []TargetGroup `json:"groups,omitempty"`
}

// TLS names a PEM certificate chain and key. Both are re-read on every Apply, so a renewed certificate
// is picked up without reopening the socket.
type TLS struct {
	// CertFile is the path of the PEM certificate chain. Required.
	CertFile string `json:"certFile"`
	// KeyFile is the path of the PEM private key. Required.
	KeyFile string `json:"keyFile"`
}

// GroupPolicy names how a request's target group is chosen.
type GroupPolicy string

const (
	// GroupWeighted shares requests between groups in proportion to TargetGroup.Weight.
	GroupWeighted GroupPolicy = "weighted"
	// GroupNearest sends every request to the group with the lowest round-trip time among those with
	// a usable target, ignoring weights (a group of weight 0 still gets nothing when another has
	// weight). A group's round-trip time is its nearest usable target's: the kernel's smoothed RTT
	// (TCP_INFO) of that target's health-check connections, so it is known before any request and
	// kept up to date for groups that get none. Targets not yet measured come after measured ones,
	// in config order.
	GroupNearest GroupPolicy = "nearest"
)

// Policy is the balancing policy of a listener.
type Policy struct {
	// Type is one of least-outstanding (default), round-robin, weighted, sticky-cookie, header-hash.
	Type PolicyType `json:"type,omitempty"`
	// Cookie is the cookie name of sticky-cookie. Default "herd-lb".
	Cookie string `json:"cookie,omitempty"`
	// Header is the request header hashed by header-hash. Required for header-hash.
	Header string `json:"header,omitempty"`
}

// HealthCheck configures how targets are judged healthy. A target gets traffic only while it is healthy
// by active checks and not ejected by passive checks.
type HealthCheck struct {
	// Disabled turns active checks off: targets count as healthy unless passively ejected. Default false.
	Disabled bool `json:"disabled,omitempty"`
	// Path is the HTTP path probed with GET; a 2xx or 3xx answer passes. Default "" probes by opening a TCP
	// connection instead.
	Path string `json:"path,omitempty"`
	// Port is the port probed. Default 0: the target's own port.
	Port int `json:"port,omitempty"`
	// Interval is the time between probes. Default 1s.
	Interval Duration `json:"interval,omitempty"`
	// Timeout bounds one probe. Default 1s, and never more than Interval.
	Timeout Duration `json:"timeout,omitempty"`
	// HealthyThreshold is how many consecutive passing probes make an unhealthy target healthy. Default 2.
	// A new target takes the verdict of its first probe.
	HealthyThreshold int `json:"healthyThreshold,omitempty"`
	// UnhealthyThreshold is how many consecutive failing probes make a healthy target unhealthy. Default 2.
	UnhealthyThreshold int `json:"unhealthyThreshold,omitempty"`
	// Consecutive5xx ejects a target at once after this many 5xx answers or timeouts in a row; a refused or
	// reset connection ejects it at the first one. Default 5.
	Consecutive5xx int `json:"consecutive5xx,omitempty"`
	// EjectionTime is how long the first ejection lasts; each further ejection in a row doubles it up to
	// MaxEjectionTime. Default 1s.
	EjectionTime Duration `json:"ejectionTime,omitempty"`
	// MaxEjectionTime caps the ejection backoff. Default 30s.
	MaxEjectionTime Duration `json:"maxEjectionTime,omitempty"`
	// CloseOnUnhealthy closes every connection of a target, busy ones included, when active checks
	// find it unhealthy: requests waiting on a target that stopped answering (a partitioned region)
	// end at once, and idempotent ones with no response byte yet are retried on another target,
	// instead of waiting out the response timeout. Default false: requests in flight run their course.
	CloseOnUnhealthy bool `json:"closeOnUnhealthy,omitempty"`
	// Paused stops health checking, active and passive: every target keeps the state it has
	// (healthy, unhealthy, ejected until its backoff ends) whatever it answers, and a new target
	// stays unchecked. It is a chaos experiment (herd chaos pause-health): what the fleet does
	// when its load balancer stops noticing failures. Default false.
	Paused bool `json:"paused,omitempty"`
}

// Retry bounds the single retry on another target that a request gets when it failed to connect, or when
// it is idempotent and its connection broke before any response byte.
type Retry struct {
	// Disabled turns retries off. Default false.
	Disabled bool `json:"disabled,omitempty"`
	// Budget is the ratio of retries to requests the listener may spend, so retries cannot amplify an
	// outage. Default 0.2.
	Budget float64 `json:"budget,omitempty"`
	// MinPerSecond is the retry rate always allowed, so a quiet listener can still retry. Default 10.
	MinPerSecond int `json:"minPerSecond,omitempty"`
}

// Timeouts of a listener.
type Timeouts struct {
	// Connect bounds opening a connection to a target. Default 2s.
	Connect Duration `json:"connect,omitempty"`
	// Response bounds the wait for a target's response headers after the request was sent, and for
	// HTTP/1.x clients also each pause while the response body streams in; a target that exceeds it gets
	// 504. Default 60s.
	Response Duration `json:"response,omitempty"`
	// ReadHeader bounds reading a client's request headers; it cuts off slowloris clients. Default 10s.
	ReadHeader Duration `json:"readHeader,omitempty"`
	// Read bounds reading a whole client request, body included. Default 60s.
	Read Duration `json:"read,omitempty"`
	// Write bounds writing a whole response to the client; upgraded (WebSocket) connections are exempt.
	// Default 60s.
	Write Duration `json:"write,omitempty"`
	// Idle bounds how long a client keep-alive connection may wait for its next request. HTTP/1.x
	// connections may be closed from 3/4 of it on: the deadline is moved lazily to spare timer updates.
	// Default 60s.
	Idle Duration `json:"idle,omitempty"`
}

// Hold bounds the requests a listener keeps waiting for a healthy target.
type Hold struct {
	// MaxQueued is how many requests may wait at once; the next one is answered 503. Default: 1000.
	MaxQueued int `json:"maxQueued,omitempty"`
	// Timeout is how long a request waits before it is answered 503. Default: 30s.
	Timeout Duration `json:"timeout,omitempty"`
}

// Limits of a listener.
type Limits struct {
	// MaxHeaderBytes bounds the size of a request's headers; more gets 431. Default 64 KiB.
	MaxHeaderBytes int `json:"maxHeaderBytes,omitempty"`
	// MaxHeaders bounds the number of distinct request header fields; more gets 431. Default 100.
	MaxHeaders int `json:"maxHeaders,omitempty"`
	// MaxBodyBytes bounds a request body; more gets 413. Default 32 MiB.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// MaxConnections bounds open client connections; further clients wait in the accept queue.
	// Default 10000.
	MaxConnections int `json:"maxConnections,omitempty"`
}

// TargetGroup is the set of targets of one fleet revision.
type TargetGroup struct {
	// Name identifies the group, conventionally the revision. Required, unique in the listener.
	Name string `json:"name"`
	// Weight is the group's relative share of new requests, 0 to 1000. If every group has weight 0 (or
	// omits it) the groups share equally; otherwise a group of weight 0 gets no new requests.
	Weight int `json:"weight,omitempty"`
	// Targets are the group's backends.
	Targets []Target `json:"targets,omitempty"`
}

// Target is one backend, usually one instance.
type Target struct {
	// ID identifies the target, usually the instance name. Required, unique in the listener.
	ID string `json:"id"`
	// Address is the target's host:port. Required.
	Address string `json:"address"`
	// Weight is the target's relative share under the weighted policy, 1 to 1000. Default 1.
	Weight int `json:"weight,omitempty"`
	// Tenant is the tenant the target serves alone, on a listener with tenancy. Default "": none
	// (on such a listener it gets no request).
	Tenant string `json:"tenant,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("1s", "250ms") in JSON and YAML.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string such as "1s" or "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"1s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Defaults, as documented on the fields above.
const (
	defaultPolicy             = PolicyLeastOutstanding
	defaultCookie             = "herd-lb"
	defaultInterval           = Duration(time.Second)
	defaultCheckTimeout       = Duration(time.Second)
	defaultHealthyThreshold   = 2
	defaultUnhealthyThreshold = 2
	defaultConsecutive5xx     = 5
	defaultEjectionTime       = Duration(time.Second)
	defaultMaxEjectionTime    = Duration(30 * time.Second)
	defaultRetryBudget        = 0.2
	defaultRetryMinPerSecond  = 10
	defaultDrainTimeout       = Duration(30 * time.Second)
	defaultHoldMaxQueued      = 1000
	defaultHoldTimeout        = Duration(30 * time.Second)
	defaultConnectTimeout     = Duration(2 * time.Second)
	defaultResponseTimeout    = Duration(60 * time.Second)
	defaultReadHeaderTimeout  = Duration(10 * time.Second)
	defaultReadTimeout        = Duration(60 * time.Second)
	defaultWriteTimeout       = Duration(60 * time.Second)
	defaultIdleTimeout        = Duration(60 * time.Second)
	defaultMaxHeaderBytes     = 64 << 10
	defaultMaxHeaders         = 100
	defaultMaxBodyBytes       = 32 << 20
	defaultMaxConnections     = 10000
	maxWeight                 = 1000
)

// WithDefaults returns a deep copy of c with every omitted field set to its documented default.
func (c Config) WithDefaults() Config {
	out := Config{Listeners: make([]Listener, len(c.Listeners)), Callers: maps.Clone(c.Callers)}
	for i, l := range c.Listeners {
		out.Listeners[i] = l.withDefaults()
	}
	return out
}

func (l Listener) withDefaults() Listener {
	setDefault(&l.Protocol, ProtocolHTTP)
	if l.TLS != nil {
		t := *l.TLS
		l.TLS = &t
	}
	if l.Protocol == ProtocolHTTP {
		setDefault(&l.BackendProtocol, BackendHTTP1)
	}
	setDefault(&l.Policy.Type, defaultPolicy)
	setDefault(&l.GroupPolicy, GroupWeighted)
	if l.Policy.Type == PolicyStickyCookie {
		setDefault(&l.Policy.Cookie, defaultCookie)
	}
	h := &l.HealthCheck
	setDefault(&h.Interval, defaultInterval)
	setDefault(&h.Timeout, min(defaultCheckTimeout, h.Interval))
	setDefault(&h.HealthyThreshold, defaultHealthyThreshold)
	setDefault(&h.UnhealthyThreshold, defaultUnhealthyThreshold)
	setDefault(&h.Consecutive5xx, defaultConsecutive5xx)
	setDefault(&h.EjectionTime, defaultEjectionTime)
	setDefault(&h.MaxEjectionTime, max(defaultMaxEjectionTime, h.EjectionTime))
	setDefault(&l.Retry.Budget, defaultRetryBudget)
	setDefault(&l.Retry.MinPerSecond, defaultRetryMinPerSecond)
	setDefault(&l.DrainTimeout, defaultDrainTimeout)
	t := &l.Timeouts
	setDefault(&t.Connect, defaultConnectTimeout)
	setDefault(&t.Response, defaultResponseTimeout)
	setDefault(&t.ReadHeader, defaultReadHeaderTimeout)
	setDefault(&t.Read, defaultReadTimeout)
	setDefault(&t.Write, defaultWriteTimeout)
	setDefault(&t.Idle, defaultIdleTimeout)
	lim := &l.Limits
	setDefault(&lim.MaxHeaderBytes, defaultMaxHeaderBytes)
	setDefault(&lim.MaxHeaders, defaultMaxHeaders)
	setDefault(&lim.MaxBodyBytes, defaultMaxBodyBytes)
	setDefault(&lim.MaxConnections, defaultMaxConnections)
	if l.Hold != nil {
		h := *l.Hold
		setDefault(&h.MaxQueued, defaultHoldMaxQueued)
		setDefault(&h.Timeout, defaultHoldTimeout)
		l.Hold = &h
	}
	l.AllowFrom = slices.Clone(l.AllowFrom)
	l.Routes = slices.Clone(l.Routes)
	groups := make([]TargetGroup, len(l.Groups))
	for i, g := range l.Groups {
		g.Targets = append([]Target(nil), g.Targets...)
		for j := range g.Targets {
			setDefault(&g.Targets[j].Weight, 1)
		}
		groups[i] = g
	}
	l.Groups = groups
	return l
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports every problem in c (after defaults), each naming the field at fault.
func (c Config) Validate() error {
	var errs []error
	names := map[string]int{}
	addrs := map[string]int{}
	for i, l := range c.Listeners {
		p := fmt.Sprintf("listeners[%d]", i)
		errs = append(errs, l.validate(p)...)
		if l.Name != "" {
			if j, dup := names[l.Name]; dup {
				errs = append(errs, fmt.Errorf("%s.name: %q is also the name of listeners[%d]", p, l.Name, j))
			}
			names[l.Name] = i
		}
		if l.Address != "" && !isEphemeral(l.Address) {
			if j, dup := addrs[l.Address]; dup {
				errs = append(errs, fmt.Errorf("%s.address: %q is also the address of listeners[%d]", p, l.Address, j))
			}
			addrs[l.Address] = i
		}
	}
	errs = append(errs, c.validateRoutes()...)
	return errors.Join(errs...)
}

func (l Listener) validate(p string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{p, field}, args...)...))
	}
	if l.Name == "" {
		bad("name", "required")
	}
	if l.Fleet == "" && len(l.Routes) == 0 {
		bad("fleet", "required")
	}
	if err := checkHostPort(l.Address, true); err != nil {
		bad("address", "%v", err)
	}
	switch l.Protocol {
	case ProtocolHTTP:
		switch l.BackendProtocol {
		case BackendHTTP1, BackendH2C:
		default:
			bad("backendProtocol", "%q is not one of http1, h2c", l.BackendProtocol)
		}
	case ProtocolTCP:
		if l.BackendProtocol != "" {
			bad("backendProtocol", "only HTTP listeners have a backend protocol")
		}
	default:
		bad("protocol", "%q is not one of http, tcp", l.Protocol)
	}
	l.Tenancy.validate(bad, l.Protocol)
	l.validateRoutes(bad)
	if l.TLS != nil && (l.TLS.CertFile == "" || l.TLS.KeyFile == "") {
		bad("tls", "certFile and keyFile are both required")
	}
	switch l.Policy.Type {
	case PolicyLeastOutstanding, PolicyRoundRobin, PolicyWeighted:
	case PolicyStickyCookie:
		if l.Protocol != ProtocolHTTP {
			bad("policy.type", "sticky-cookie needs an HTTP listener")
		}
	case PolicyHeaderHash:
		if l.Protocol != ProtocolHTTP {
			bad("policy.type", "header-hash needs an HTTP listener")
		}
		if l.Policy.Header == "" {
			bad("policy.header", "required by header-hash")
		}
	default:
		bad("policy.type", "%q is not one of least-outstanding, round-robin, weighted, sticky-cookie, header-hash", l.Policy.Type)
	}
	switch l.GroupPolicy {
	case GroupWeighted, GroupNearest:
	default:
		bad("groupPolicy", "%q is not one of weighted, nearest", l.GroupPolicy)
	}
	h := l.HealthCheck
	if h.Port < 0 || h.Port > 65535 {
		bad("healthCheck.port", "%d is not a port", h.Port)
	}
	if h.Path != "" && h.Path[0] != '/' {
		bad("healthCheck.path", "%q must start with /", h.Path)
	}
	positive := func(field string, d Duration) {
		if d <= 0 {
			bad(field, "must be positive, got %s", d)
		}
	}
	positive("healthCheck.interval", h.Interval)
	positive("healthCheck.timeout", h.Timeout)
	if h.Timeout > h.Interval {
		bad("healthCheck.timeout", "%s is longer than the interval %s", h.Timeout, h.Interval)
	}
	if h.HealthyThreshold < 1 || h.UnhealthyThreshold < 1 || h.Consecutive5xx < 1 {
		bad("healthCheck", "thresholds must be at least 1")
	}
	positive("healthCheck.ejectionTime", h.EjectionTime)
	if h.MaxEjectionTime < h.EjectionTime {
		bad("healthCheck.maxEjectionTime", "%s is shorter than ejectionTime %s", h.MaxEjectionTime, h.EjectionTime)
	}
	if l.Retry.Budget < 0 || l.Retry.Budget > 1 {
		bad("retry.budget", "%v is not between 0 and 1", l.Retry.Budget)
	}
	if l.Retry.MinPerSecond < 0 {
		bad("retry.minPerSecond", "must not be negative")
	}
	positive("drainTimeout", l.DrainTimeout)
	t := l.Timeouts
	positive("timeouts.connect", t.Connect)
	positive("timeouts.response", t.Response)
	positive("timeouts.readHeader", t.ReadHeader)
	positive("timeouts.read", t.Read)
	positive("timeouts.write", t.Write)
	positive("timeouts.idle", t.Idle)
	if l.Limits.MaxHeaderBytes < 1024 {
		bad("limits.maxHeaderBytes", "must be at least 1024")
	}
	if l.Limits.MaxHeaders < 1 || l.Limits.MaxBodyBytes < 0 || l.Limits.MaxConnections < 1 {
		bad("limits", "limits must be positive")
	}
	if h := l.Hold; h != nil {
		if h.MaxQueued < 1 {
			bad("hold.maxQueued", "must be at least 1")
		}
		positive("hold.timeout", h.Timeout)
	}
	groups := map[string]int{}
	ids := map[string]string{}
	for i, g := range l.Groups {
		gp := fmt.Sprintf("groups[%d]", i)
		if g.Name == "" {
			bad(gp+".name", "required")
		} else if j, dup := groups[g.Name]; dup {
			bad(gp+".name", "%q is also the name of groups[%d]", g.Name, j)
		}
		groups[g.Name] = i
		if g.Weight < 0 || g.Weight > maxWeight {
			bad(gp+".weight", "%d is not between 0 and %d", g.Weight, maxWeight)
		}
		for j, t := range g.Targets {
			tp := fmt.Sprintf("%s.targets[%d]", gp, j)
			if t.ID == "" {
				bad(tp+".id", "required")
			} else if other, dup := ids[t.ID]; dup {
				bad(tp+".id", "%q is also the id of %s", t.ID, other)
			}
			ids[t.ID] = tp
			if err := checkHostPort(t.Address, false); err != nil {
				bad(tp+".address", "%v", err)
			}
			if t.Weight < 1 || t.Weight > maxWeight {
				bad(tp+".weight", "%d is not between 1 and %d", t.Weight, maxWeight)
			}
		}
	}
	return errs
}

// checkHostPort accepts host:port; a listen address may leave the host empty or use port 0.
func checkHostPort(addr string, listen bool) error {
	if addr == "" {
		return errors.New("required")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !listen) {
		return fmt.Errorf("%q has no valid port", addr)
	}
	if host == "" && !listen {
		return fmt.Errorf("%q has no host", addr)
	}
	return nil
}

// isEphemeral reports whether addr asks the kernel to choose the port, so two such listeners never clash.
func isEphemeral(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

// ParseConfig reads a Config from YAML or JSON strictly: an unknown or duplicate field is an error, so a
// misspelt setting is never silently ignored. It does not validate; Apply does.
func ParseConfig(data []byte) (Config, error) {
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return Config{}, fmt.Errorf("parsing load balancer config: %w", err)
	}
	return cfg, nil
}
