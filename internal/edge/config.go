package edge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy says how a behavior's responses are keyed and how long they are kept.
type Policy struct {
	// IgnoreOrigin keeps every storable response for DefaultTTL, whatever its Cache-Control,
	// Expires or Last-Modified say; no-store, private and no-cache are honoured still.
	IgnoreOrigin bool
	// DefaultTTL is the lifetime of a response that states none, in place of the heuristic.
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound every lifetime (MaxTTL 0: no bound).
	MinTTL, MaxTTL time.Duration
	// QueryString puts the query in the cache key.
	QueryString bool
	// Headers and Cookies put these request headers' and cookies' values in the cache key, and so
	// are forwarded to the origin; other cookies are not.
	Headers []string
	Cookies []string
	// Compress serves gzip or br to clients that accept them (compress.go), from the identity the
	// origin is asked for.
	Compress bool
}

// Behavior is how requests whose path matches PathPattern are served.
type Behavior struct {
	// PathPattern matches the request path: '*' any run of characters (slashes too), '?' one.
	PathPattern string
	// Origin serves the behavior's misses.
	Origin Origin
	Policy Policy
	// AllowedMethods are answered; others get 405. Default GET and HEAD.
	AllowedMethods []string
	// Coalesce makes concurrent misses for one key share one origin request; a waiter gives up
	// after CoalesceWait (default 10s) and asks the origin itself. A key whose response was not
	// storable is not coalesced for HitForMiss (default 10s).
	Coalesce     bool
	CoalesceWait time.Duration
	HitForMiss   time.Duration
	// MaxObjectSize is the largest body stored (default 10 MiB); larger ones are streamed.
	MaxObjectSize int64
}

// Origin is where misses go: Primary, and Secondary (optional) when the primary cannot be reached
// or answers 5xx to a GET or HEAD.
type Origin struct {
	Primary   *url.URL
	Secondary *url.URL
}

// Config is an edge location's whole configuration.
type Config struct {
	// Behaviors in order; a request whose path matches none is refused with 404, so the last one is
	// usually "*".
	Behaviors []Behavior
	// MaxBytes bounds the memory tier (default 256 MiB).
	MaxBytes int64
	// Transport sends the origin requests (default: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// MetricLabels are constant labels on every metric (the distribution's name in herd up, which
	// runs several edges). Default: none.
	MetricLabels prometheus.Labels
	// DiskDir, if set, holds the disk tier (disk.go), bounded by DiskBytes (default 1 GiB): what
	// the memory tier stores is written there too, and found again after a restart.
	DiskDir   string
	DiskBytes int64
}

const (
	defaultCoalesceWait  = 10 * time.Second
	defaultHitForMiss    = 10 * time.Second
	defaultMaxObjectSize = 10 << 20
	defaultMaxBytes      = 256 << 20
	defaultDiskBytes     = 1 << 30
)

// withDefaults fills the zero fields and checks what the edge cannot serve without.
func (c Config) withDefaults() (Config, error) {
	if len(c.Behaviors) == 0 {
		return c, fmt.Errorf("edge: no behaviors")
	}
	c.Behaviors = slices.Clone(c.Behaviors)
	for i := range c.Behaviors {
		b := &c.Behaviors[i]
		if b.Origin.Primary == nil {
			return c, fmt.Errorf("edge: behavior %q has no origin", b.PathPattern)
		}
		if len(b.AllowedMethods) == 0 {
			b.AllowedMethods = []string{http.MethodGet, http.MethodHead}
		}
		if b.CoalesceWait <= 0 {
			b.CoalesceWait = defaultCoalesceWait
		}
		if b.HitForMiss <= 0 {
			b.HitForMiss = defaultHitForMiss
		}
		if b.MaxObjectSize <= 0 {
			b.MaxObjectSize = defaultMaxObjectSize
		}
		for j, h := range b.Policy.Headers {
			b.Policy.Headers[j] = http.CanonicalHeaderKey(h)
		}
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = defaultMaxBytes
	}
	if c.DiskBytes <= 0 {
		c.DiskBytes = defaultDiskBytes
	}
	if c.Transport == nil {
		c.Transport = NewTransport(nil)
	}
	return c, nil
}

// NewTransport is the edge's origin transport: an origin's header is bounded (64 KiB), and many
// connections to one origin are kept. rootCAs, if set, replaces the system's roots.
func NewTransport(rootCAs *x509.CertPool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxResponseHeaderBytes = 64 << 10
	t.MaxIdleConnsPerHost = 256
	if rootCAs != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: rootCAs, MinVersion: tls.VersionTLS12}
	}
	return t
}

// behavior returns the first behavior whose pattern matches path.
func (c *Config) behavior(path string) *Behavior {
	for i := range c.Behaviors {
		if MatchPath(c.Behaviors[i].PathPattern, path) {
			return &c.Behaviors[i]
		}
	}
	return nil
}

func (b *Behavior) allows(method string) bool {
	return slices.Contains(b.AllowedMethods, method)
}

// MatchPath reports whether path matches pattern, where '*' stands for any run of characters,
// slashes included, and '?' for one character, as CDN path patterns do.
func MatchPath(pattern, path string) bool {
	// Iterative matching with one backtrack point: linear in practice, no recursion to blow up.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(path) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == path[s]):
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	return strings.Trim(pattern[p:], "*") == ""
}
