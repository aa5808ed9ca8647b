package v1alpha1

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Tenancy gives every tenant of a fleet instances of its own: the load balancer reads the tenant
// of each request from its key and sends it only to that tenant's instances.
type Tenancy struct {
	// Key is where a request names its tenant: "header:NAME" (the value of header NAME, e.g.
	// "header:X-Tenant"), "host" (the first label of the Host header: acme.example.com is tenant
	// acme) or "pathPrefix" (the first segment of the path: /acme/orders is tenant acme; the path
	// is forwarded unchanged). Required.
	Key string `json:"key"`
	// InstancesPerTenant bounds each active tenant's instances. Default: {min: 1, max: min}.
	InstancesPerTenant TenantInstances `json:"instancesPerTenant,omitzero"`
	// IdleAfter is how long a tenant may go without a request before its instances are deleted
	// (scaled to zero); its next request takes an instance from the warm pool. 0 keeps every
	// tenant's instances. Default: 10m.
	IdleAfter *Duration `json:"idleAfter,omitempty"`
	// Tenants are the tenants known in advance (DNS labels). Default: none; with open false, a
	// tenant neither listed nor holding instances is refused with 404.
	Tenants []string `json:"tenants,omitempty"`
	// Open accepts any tenant a request names: an unknown one takes an instance from the warm pool
	// as a listed one does. Default: false (unknown tenants get 404).
	Open bool `json:"open,omitempty"`
	// WarmPool is how many booted instances no tenant owns yet are kept ready; a tenant with no
	// instance takes one of them, so its first request waits for no boot. Default: 1.
	WarmPool *int32 `json:"warmPool,omitempty"`
	// MaxInFlight bounds each tenant's requests in flight at the load balancer at once, so that
	// one tenant's flood cannot take the load balancer from the others: a request over it waits,
	// in arrival order, for one of its own tenant's to end, up to maxWait, and is then answered
	// 429 with Retry-After. 0: no bound. Default: 64.
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`
	// RequestsPerSecond bounds each tenant's rate of requests at the load balancer (a token
	// bucket holding a tenth of a second's worth): a request over it waits for its turn (waiting
	// requests go on in batches, each at most 10 ms after its turn), up to maxWait, and is then
	// answered 429 with Retry-After. 0: no bound. Default: 0 (what an
	// instance can serve depends on the workload).
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`
	// MaxWait is how long a request over its tenant's maxInFlight or requestsPerSecond waits for
	// its turn; 0 answers 429 at once. Default: 1s.
	MaxWait *Duration `json:"maxWait,omitempty"`
}

// TenantInstances bounds the instances of one tenant.
type TenantInstances struct {
	// Min is how many instances an active tenant runs. Default: 1.
	Min *int32 `json:"min,omitempty"`
	// Max is the most instances a tenant may run. Default: min.
	Max *int32 `json:"max,omitempty"`
}

// Tenancy keys (Tenancy.Key), besides "header:NAME".
const (
	TenancyKeyHost       = "host"
	TenancyKeyPathPrefix = "pathPrefix"
	// TenancyKeyHeaderPrefix starts a key that names a request header.
	TenancyKeyHeaderPrefix = "header:"
)

// LabelTenant is on every instance a tenant owns; its value is the tenant.
const LabelTenant = "herd.dev/tenant"

// Defaults of spec.tenancy.
const (
	DefaultIdleAfter         = 10 * time.Minute
	DefaultTenantMaxInFlight = 64
	DefaultTenantMaxWait     = time.Second
)

// setTenancyDefaults fills spec.tenancy's unset fields.
func setTenancyDefaults(s *FleetSpec) {
	t := s.Tenancy
	if t == nil {
		return
	}
	if t.InstancesPerTenant.Min == nil {
		t.InstancesPerTenant.Min = int32p(1)
	}
	if t.InstancesPerTenant.Max == nil {
		t.InstancesPerTenant.Max = int32p(max(*t.InstancesPerTenant.Min, 1))
	}
	if t.IdleAfter == nil {
		t.IdleAfter = durp(DefaultIdleAfter)
	}
	if t.WarmPool == nil {
		t.WarmPool = int32p(1)
	}
	if t.MaxInFlight == nil {
		t.MaxInFlight = int32p(DefaultTenantMaxInFlight)
	}
	if t.MaxWait == nil {
		t.MaxWait = durp(DefaultTenantMaxWait)
	}
}

// validateTenancy checks a defaulted spec.tenancy with apimachinery's field errors.
func validateTenancy(s *FleetSpec) field.ErrorList {
	t := s.Tenancy
	if t == nil {
		return nil
	}
	p := field.NewPath("spec", "tenancy")
	var errs field.ErrorList
	if _, err := ParseTenancyKey(t.Key); err != nil {
		errs = append(errs, field.Invalid(p.Child("key"), t.Key, err.Error()))
	}
	ip := p.Child("instancesPerTenant")
	if mn := t.InstancesPerTenant.Min; mn != nil && *mn < 1 {
		errs = append(errs, field.Invalid(ip.Child("min"), *mn, "must be >= 1: an active tenant needs an instance (idleAfter scales an idle one to zero)"))
	}
	if mn, mx := t.InstancesPerTenant.Min, t.InstancesPerTenant.Max; mn != nil && mx != nil && *mx < *mn {
		errs = append(errs, field.Invalid(ip.Child("max"), *mx, fmt.Sprintf("must be >= instancesPerTenant.min (%d)", *mn)))
	}
	if t.IdleAfter != nil && t.IdleAfter.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("idleAfter"), t.IdleAfter.Duration.String(), "must be >= 0: a duration such as 10m, or 0 to keep idle tenants' instances"))
	}
	if t.WarmPool != nil && *t.WarmPool < 0 {
		errs = append(errs, field.Invalid(p.Child("warmPool"), *t.WarmPool, "must be >= 0"))
	}
	if t.MaxInFlight != nil && *t.MaxInFlight < 0 {
		errs = append(errs, field.Invalid(p.Child("maxInFlight"), *t.MaxInFlight, "must be >= 0: a tenant's requests in flight at once, or 0 for no bound"))
	}
	if t.RequestsPerSecond < 0 {
		errs = append(errs, field.Invalid(p.Child("requestsPerSecond"), t.RequestsPerSecond, "must be >= 0: a tenant's requests per second, or 0 for no bound"))
	}
	if t.MaxWait != nil && t.MaxWait.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("maxWait"), t.MaxWait.Duration.String(), "must be >= 0: a duration such as 1s, or 0 to answer 429 at once"))
	}
	seen := map[string]int{}
	for i, name := range t.Tenants {
		tp := p.Child("tenants").Index(i)
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(tp, name, "must be a DNS label such as \"acme\": "+strings.Join(msgs, "; ")))
		}
		if j, dup := seen[name]; dup {
			errs = append(errs, field.Invalid(tp, name, fmt.Sprintf("duplicates tenants[%d]: list each tenant once", j)))
		}
		seen[name] = i
	}
	if len(t.Tenants) == 0 && !t.Open {
		errs = append(errs, field.Required(p.Child("tenants"), "list the tenants, or set open: true to accept any tenant a request names"))
	}
	http := false
	for _, l := range s.Listeners {
		http = http || l.Protocol == ProtocolHTTP
	}
	if !http {
		errs = append(errs, field.Required(field.NewPath("spec", "listeners"), "tenancy routes HTTP requests by their tenant: add a listener with protocol: http"))
	}
	if len(s.Regions) > 1 {
		errs = append(errs, field.Invalid(field.NewPath("spec", "regions"), len(s.Regions), "tenancy runs a fleet in one region: keep one region, or make a fleet per region"))
	}
	if s.Autoscaling != nil {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "autoscaling"), "tenancy scales each tenant by its own activity and keeps its own warm pool (spec.tenancy.warmPool): remove autoscaling"))
	}
	if s.Rollout.Strategy != StrategyRolling {
		errs = append(errs, field.NotSupported(field.NewPath("spec", "rollout", "strategy"), s.Rollout.Strategy, []RolloutStrategy{StrategyRolling}))
	}
	return errs
}

// TenancyKey is a parsed spec.tenancy.key.
type TenancyKey struct {
	// Kind is "header", TenancyKeyHost or TenancyKeyPathPrefix.
	Kind string
	// Header is the header's name for kind "header".
	Header string
}

// ParseTenancyKey reads a spec.tenancy.key.
func ParseTenancyKey(key string) (TenancyKey, error) {
	switch {
	case key == TenancyKeyHost, key == TenancyKeyPathPrefix:
		return TenancyKey{Kind: key}, nil
	case strings.HasPrefix(key, TenancyKeyHeaderPrefix):
		name := strings.TrimPrefix(key, TenancyKeyHeaderPrefix)
		if msgs := validation.IsHTTPHeaderName(name); name == "" || len(msgs) > 0 {
			return TenancyKey{}, fmt.Errorf("needs a header name after \"header:\", such as \"header:X-Tenant\"")
		}
		return TenancyKey{Kind: "header", Header: name}, nil
	}
	return TenancyKey{}, fmt.Errorf("must be \"header:NAME\" (e.g. \"header:X-Tenant\"), \"host\" or \"pathPrefix\"")
}

// TenantPin keeps one tenant on a node image of its own, whatever spec.image says: `herd rollout
// pin FLEET --tenant T` (to the image the fleet boots then, or to --image, a canary that is one
// customer) until `herd rollout unpin`, which rolls the tenant back to the fleet's image.
type TenantPin struct {
	// Ref is the image as the user named it; Digest what it resolved to (the bundle the tenant's
	// instances boot).
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// At is when the API recorded the pin.
	At time.Time `json:"at"`
}
