package v1alpha1

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// edgeMethods are the methods a behavior may allow.
var edgeMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// SetDistributionDefaults fills the fields a Distribution may leave out.
func SetDistributionDefaults(d *Distribution) {
	for i := range d.Spec.Listeners {
		l := &d.Spec.Listeners[i]
		if l.Address == "" {
			l.Address = "127.0.0.1"
		}
		if l.Name == "" {
			scheme := "http"
			if l.TLS != nil {
				scheme = "https"
			}
			l.Name = fmt.Sprintf("%s-%d", scheme, l.Port)
		}
	}
	for i := range d.Spec.Behaviors {
		b := &d.Spec.Behaviors[i]
		for j, m := range b.AllowedMethods {
			b.AllowedMethods[j] = strings.ToUpper(m)
		}
		for _, m := range []string{"GET", "HEAD"} {
			if !slices.Contains(b.AllowedMethods, m) {
				b.AllowedMethods = append(b.AllowedMethods, m) // after the written ones, so that errors name their index
			}
		}
		if b.Coalesce == nil {
			b.Coalesce = ptrTo(true)
		}
		p := &b.CachePolicy
		if p.HonorOrigin == nil {
			p.HonorOrigin = ptrTo(true)
		}
		if p.QueryString == nil {
			p.QueryString = ptrTo(true)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// ValidateDistribution checks a defaulted Distribution and returns every problem found.
func ValidateDistribution(d *Distribution) ErrorList {
	var errs ErrorList
	validateTypeMeta(&errs, d.TypeMeta, KindDistribution)
	validateName(&errs, "metadata.name", d.Metadata.Name)
	spec := field.NewPath("spec")
	var fe field.ErrorList
	if d.Spec.CacheSize < 0 {
		fe = append(fe, field.Invalid(spec.Child("cacheSize"), d.Spec.CacheSize, "must be a positive number of bytes, or left out for 256 MiB"))
	}
	if d.Spec.DiskCacheSize < 0 {
		fe = append(fe, field.Invalid(spec.Child("diskCacheSize"), d.Spec.DiskCacheSize, "must be a positive number of bytes, or left out for no disk tier"))
	}
	fe = append(fe, validateEdgeListeners(&errs, spec.Child("listeners"), d.Spec.Listeners)...)
	origins, oerrs := validateEdgeOrigins(&errs, spec.Child("origins"), d.Spec.Origins)
	fe = append(fe, oerrs...)
	behaviors := spec.Child("behaviors")
	if len(d.Spec.Behaviors) == 0 {
		fe = append(fe, field.Required(behaviors, `at least one, such as {pathPattern: "*", origin: <an origin's name>}`))
	}
	for i, b := range d.Spec.Behaviors {
		p := behaviors.Index(i)
		if b.PathPattern == "" {
			fe = append(fe, field.Required(p.Child("pathPattern"), `a path pattern such as "/static/*", or "*" for every path`))
		} else if b.PathPattern[0] != '/' && b.PathPattern[0] != '*' {
			fe = append(fe, field.Invalid(p.Child("pathPattern"), b.PathPattern, `must start with "/" or "*"`))
		}
		if b.Origin == "" {
			fe = append(fe, field.Required(p.Child("origin"), "the name of one of spec.origins"))
		} else if !slices.Contains(origins, b.Origin) {
			fe = append(fe, field.NotSupported(p.Child("origin"), b.Origin, origins))
		}
		for j, m := range b.AllowedMethods {
			if !slices.Contains(edgeMethods, m) {
				fe = append(fe, field.NotSupported(p.Child("allowedMethods").Index(j), m, edgeMethods))
			}
		}
		if b.MaxObjectSize < 0 {
			fe = append(fe, field.Invalid(p.Child("maxObjectSize"), b.MaxObjectSize, "must be a positive number of bytes, or left out for 10 MiB"))
		}
		fe = append(fe, validateCachePolicy(p.Child("cachePolicy"), b.CachePolicy)...)
	}
	errs.addFieldErrors(fe, "use one of these")
	return errs
}

func validateEdgeListeners(errs *ErrorList, path *field.Path, ls []EdgeListener) field.ErrorList {
	var fe field.ErrorList
	if len(ls) == 0 {
		fe = append(fe, field.Required(path, "at least one, such as {port: 8080}"))
	}
	seen := map[string]int{}
	for i, l := range ls {
		p := path.Index(i)
		if l.Port < 1 || l.Port > 65535 {
			fe = append(fe, field.Invalid(p.Child("port"), l.Port, "must be between 1 and 65535"))
		}
		if net.ParseIP(l.Address) == nil {
			fe = append(fe, field.Invalid(p.Child("address"), l.Address, "must be an IP address, such as 127.0.0.1 or 0.0.0.0"))
		}
		addr := net.JoinHostPort(l.Address, fmt.Sprint(l.Port))
		if j, dup := seen[addr]; dup {
			fe = append(fe, field.Duplicate(p.Child("port"), fmt.Sprintf("%s, as %s", addr, path.Index(j))))
		}
		seen[addr] = i
		validateListenerTLS(errs, p.String(), Listener{TLS: l.TLS})
	}
	return fe
}

// validateEdgeOrigins checks the origins and returns their names.
func validateEdgeOrigins(errs *ErrorList, path *field.Path, os []EdgeOrigin) ([]string, field.ErrorList) {
	var fe field.ErrorList
	if len(os) == 0 {
		fe = append(fe, field.Required(path, "at least one, such as {name: web, fleet: web} or {name: api, url: http://127.0.0.1:9000}"))
	}
	var names []string
	for i, o := range os {
		p := path.Index(i)
		validateName(errs, p.Child("name").String(), o.Name)
		if slices.Contains(names, o.Name) {
			fe = append(fe, field.Duplicate(p.Child("name"), o.Name))
		}
		names = append(names, o.Name)
		switch {
		case (o.Fleet == "") == (o.URL == ""):
			fe = append(fe, field.Invalid(p, o.Name, "set exactly one of fleet (a fleet's name) and url"))
		case o.Fleet != "":
			validateName(errs, p.Child("fleet").String(), o.Fleet)
		default:
			u, err := url.Parse(o.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
				fe = append(fe, field.Invalid(p.Child("url"), o.URL, "must be an http or https URL with a host, such as http://127.0.0.1:9000, without query"))
			}
		}
		if o.Listener != "" && o.Fleet == "" {
			fe = append(fe, field.Invalid(p.Child("listener"), o.Listener, "names a fleet's listener: set fleet too, or remove listener"))
		}
	}
	for i, o := range os {
		p := path.Index(i).Child("secondary")
		switch {
		case o.Secondary == "":
		case o.Secondary == o.Name:
			fe = append(fe, field.Invalid(p, o.Secondary, "must name another origin"))
		case !slices.Contains(names, o.Secondary):
			fe = append(fe, field.NotSupported(p, o.Secondary, names))
		}
	}
	return names, fe
}

func validateCachePolicy(p *field.Path, c CachePolicy) field.ErrorList {
	var fe field.ErrorList
	for _, t := range []struct {
		name string
		d    *Duration
	}{{"defaultTTL", c.DefaultTTL}, {"minTTL", c.MinTTL}, {"maxTTL", c.MaxTTL}} {
		if t.d != nil && t.d.Duration < 0 {
			fe = append(fe, field.Invalid(p.Child(t.name), t.d.String(), "must not be negative"))
		}
	}
	if c.MinTTL != nil && c.MaxTTL != nil && c.MaxTTL.Duration > 0 && c.MinTTL.Duration > c.MaxTTL.Duration {
		fe = append(fe, field.Invalid(p.Child("minTTL"), c.MinTTL.String(), fmt.Sprintf("must be <= maxTTL (%s): lower minTTL or raise maxTTL", c.MaxTTL)))
	}
	if c.HonorOrigin != nil && !*c.HonorOrigin && (c.DefaultTTL == nil || c.DefaultTTL.Duration == 0) {
		fe = append(fe, field.Required(p.Child("defaultTTL"), "with honorOrigin: false every response is kept for defaultTTL: give one, such as 60s"))
	}
	for i, h := range c.Headers {
		if h == "" || strings.ContainsAny(h, " :\t") || http.CanonicalHeaderKey(h) == "" {
			fe = append(fe, field.Invalid(p.Child("headers").Index(i), h, "must be a header name, such as Accept-Language"))
		}
	}
	for i, ck := range c.Cookies {
		if ck == "" || strings.ContainsAny(ck, " ;=,\t") {
			fe = append(fe, field.Invalid(p.Child("cookies").Index(i), ck, "must be a cookie name"))
		}
	}
	return fe
}
