package v1alpha1

// Distribution is a caching and coalescing front for fleets or URLs, served by `herd edge`: its
// listeners take requests, its behaviors match them by path and say how they are cached, and its
// origins answer the misses.
type Distribution struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta       `json:"metadata"`
	Spec     DistributionSpec `json:"spec"`
	// Status is where herd up's edge location serves the Distribution, as the replica that
	// answered sees it; it is not stored, and an apply ignores it.
	Status DistributionStatus `json:"status,omitzero"`
}

// DistributionStatus is an edge location's view of its Distribution.
type DistributionStatus struct {
	// Listeners are the Distribution's listeners, in order: where each serves, or why not.
	Listeners []EdgeListenerStatus `json:"listeners,omitempty"`
	// Error says why the location does not serve the Distribution as written (an origin's fleet
	// that does not exist, say); it serves the last version it could meanwhile.
	Error string `json:"error,omitempty"`
}

// EdgeListenerStatus is one listener of an edge location.
type EdgeListenerStatus struct {
	Name string `json:"name"`
	// Address is the address it serves on, when it does.
	Address string `json:"address,omitempty"`
	// Error says why it does not.
	Error string `json:"error,omitempty"`
}

// DistributionSpec is what the edge serves.
type DistributionSpec struct {
	// Listeners are where the edge takes requests. At least one.
	Listeners []EdgeListener `json:"listeners"`
	// Origins are where misses go, referred to by name from behaviors. At least one.
	Origins []EdgeOrigin `json:"origins"`
	// Behaviors match request paths in order; the first that matches serves the request. A request
	// no behavior matches gets 404, so the last one is usually pathPattern "*". At least one.
	Behaviors []EdgeBehavior `json:"behaviors"`
	// CacheSize bounds the memory the cache holds, in bytes. Default: 268435456 (256 MiB).
	CacheSize int64 `json:"cacheSize,omitempty"`
	// DiskCacheSize, if set, adds a disk tier of this many bytes behind the memory: what the edge
	// stores is written to files under the data directory of the herd up (or herd edge) that runs
	// the location (DATA_DIR/edge/NAME), found again after a restart, and never served torn after
	// a crash. Read when the location starts. Default: 0 (memory only).
	DiskCacheSize int64 `json:"diskCacheSize,omitempty"`
}

// EdgeListener is one address the edge listens on, cleartext or HTTPS.
type EdgeListener struct {
	// Name identifies the listener. Default: "http-<port>" or "https-<port>".
	Name string `json:"name,omitempty"`
	// Address is the IP address to listen on. Default: 127.0.0.1.
	Address string `json:"address,omitempty"`
	// Port is the port (1-65535). Required.
	Port int32 `json:"port"`
	// TLS, if set, makes the listener HTTPS, with certificate files or a certificate from herd's
	// local CA (as a fleet listener's tls). Default: none (cleartext).
	TLS *ListenerTLS `json:"tls,omitempty"`
}

// EdgeOrigin is an origin: a fleet, reached through the load balancer's listener, or a URL.
type EdgeOrigin struct {
	// Name identifies the origin for behaviors. Required.
	Name string `json:"name"`
	// Fleet is the name of a fleet; the edge sends to its listener. Set fleet or url.
	Fleet string `json:"fleet,omitempty"`
	// Listener names the fleet's listener. Default: the fleet's first http listener.
	Listener string `json:"listener,omitempty"`
	// URL is an http or https URL (scheme, host and optional port, optional path prefix). Set
	// fleet or url.
	URL string `json:"url,omitempty"`
	// Secondary names another origin that gets a GET or HEAD when this one cannot be reached or
	// answers 5xx. Default: none.
	Secondary string `json:"secondary,omitempty"`
}

// EdgeBehavior is how the requests whose path matches PathPattern are served.
type EdgeBehavior struct {
	// PathPattern matches the request path: '*' matches any characters (slashes too), '?' one.
	// Required; "*" matches every path.
	PathPattern string `json:"pathPattern"`
	// Origin names the origin that serves the misses. Required.
	Origin string `json:"origin"`
	// AllowedMethods are answered; others get 405. GET and HEAD are always among them; the others
	// (POST, PUT, PATCH, DELETE, OPTIONS) go to the origin uncached. Default: [GET, HEAD].
	AllowedMethods []string `json:"allowedMethods,omitempty"`
	// CachePolicy says how long responses are kept and what the cache key holds.
	CachePolicy CachePolicy `json:"cachePolicy,omitempty"`
	// Coalesce makes concurrent misses for one object share one origin request. Default: true.
	Coalesce *bool `json:"coalesce,omitempty"`
	// MaxObjectSize is the largest body stored, in bytes; larger ones are streamed and not stored.
	// Default: 10485760 (10 MiB).
	MaxObjectSize int64 `json:"maxObjectSize,omitempty"`
	// Compress serves br or gzip, as the client's Accept-Encoding prefers, of textual responses of
	// 1,000 bytes or more that the origin sent without a coding and without no-transform; each
	// coding is compressed once and stored as a variant (Vary: Accept-Encoding). The origin is
	// asked for the identity. Default: false.
	Compress bool `json:"compress,omitempty"`
}

// CachePolicy is a behavior's freshness and cache key.
type CachePolicy struct {
	// HonorOrigin follows the origin's Cache-Control and Expires. With false, every storable
	// response is kept for defaultTTL (no-store, private and no-cache still hold). Default: true.
	HonorOrigin *bool `json:"honorOrigin,omitempty"`
	// DefaultTTL is the lifetime of a response that states none. Default: none (the standard's
	// heuristic, from Last-Modified).
	DefaultTTL *Duration `json:"defaultTTL,omitempty"`
	// MinTTL raises every lifetime to at least this. Default: 0.
	MinTTL *Duration `json:"minTTL,omitempty"`
	// MaxTTL caps every lifetime. Default: none.
	MaxTTL *Duration `json:"maxTTL,omitempty"`
	// QueryString puts the query string in the cache key (and forwards it). Default: true.
	QueryString *bool `json:"queryString,omitempty"`
	// Headers are request headers whose values are part of the cache key. Default: none.
	Headers []string `json:"headers,omitempty"`
	// Cookies are cookies whose values are part of the cache key; only these reach the origin.
	// Default: none.
	Cookies []string `json:"cookies,omitempty"`
}

// GetMeta gives generic code access to an object's metadata.
func (d *Distribution) GetMeta() *ObjectMeta { return &d.Metadata }
