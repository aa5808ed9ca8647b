package edge

import (
	"fmt"
	"net/url"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// FromDistribution turns a defaulted, validated Distribution into an edge Config. originURL gives
// the URL of each origin: its url, or where its fleet's listener is served.
func FromDistribution(d *v1alpha1.Distribution, originURL func(v1alpha1.EdgeOrigin) (*url.URL, error)) (Config, error) {
	urls := map[string]*url.URL{}
	byName := map[string]v1alpha1.EdgeOrigin{}
	for _, o := range d.Spec.Origins {
		u, err := originURL(o)
		if err != nil {
			return Config{}, fmt.Errorf("origin %s: %w", o.Name, err)
		}
		urls[o.Name], byName[o.Name] = u, o
	}
	cfg := Config{MaxBytes: d.Spec.CacheSize, DiskBytes: d.Spec.DiskCacheSize}
	for _, b := range d.Spec.Behaviors {
		o := byName[b.Origin]
		p := b.CachePolicy
		eb := Behavior{
			PathPattern:    b.PathPattern,
			Origin:         Origin{Primary: urls[o.Name]},
			AllowedMethods: b.AllowedMethods,
			Coalesce:       b.Coalesce == nil || *b.Coalesce,
			MaxObjectSize:  b.MaxObjectSize,
			Policy: Policy{
				IgnoreOrigin: p.HonorOrigin != nil && !*p.HonorOrigin,
				QueryString:  p.QueryString == nil || *p.QueryString,
				Headers:      p.Headers,
				Cookies:      p.Cookies,
				Compress:     b.Compress,
			},
		}
		if o.Secondary != "" {
			eb.Origin.Secondary = urls[o.Secondary]
		}
		for _, t := range []struct {
			from *v1alpha1.Duration
			to   *time.Duration
		}{{p.DefaultTTL, &eb.Policy.DefaultTTL}, {p.MinTTL, &eb.Policy.MinTTL}, {p.MaxTTL, &eb.Policy.MaxTTL}} {
			if t.from != nil {
				*t.to = t.from.Duration
			}
		}
		cfg.Behaviors = append(cfg.Behaviors, eb)
	}
	return cfg, nil
}
