package v1alpha1

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// FieldError is one problem with one field, phrased so that the user knows the fix.
type FieldError struct {
	// Field is the path of the field, e.g. "spec.replicas.min".
	Field string
	// Message says what is wrong and what is expected.
	Message string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ErrorList is every problem found in an object. Validation reports all of them at once.
type ErrorList []FieldError

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

func (l *ErrorList) add(field, format string, args ...any) {
	*l = append(*l, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// ErrOrNil returns nil for an empty list, so callers can return it as an error.
func (l ErrorList) ErrOrNil() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

var dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// validateName checks a DNS label (RFC 1123 label that starts with a letter).
func validateName(errs *ErrorList, field, name string) {
	switch {
	case name == "":
		errs.add(field, "required: give a name such as \"web\"")
	case len(name) > 63:
		errs.add(field, "must be at most 63 characters (got %d)", len(name))
	case !dnsLabel.MatchString(name):
		errs.add(field, "must be a DNS label: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit (got %q)", name)
	}
}

func validateTypeMeta(errs *ErrorList, tm TypeMeta, kind string) {
	if tm.APIVersion != GroupVersion {
		errs.add("apiVersion", "must be %q (got %q)", GroupVersion, tm.APIVersion)
	}
	if tm.Kind != kind {
		errs.add("kind", "must be %q (got %q)", kind, tm.Kind)
	}
}

func validatePort(errs *ErrorList, field string, p int32, required bool) {
	if p == 0 && required {
		errs.add(field, "required: a port between 1 and 65535")
		return
	}
	if p < 0 || p > 65535 {
		errs.add(field, "must be between 1 and 65535 (got %d)", p)
	}
}

// ValidateFleet checks a defaulted Fleet and returns every problem found.
func ValidateFleet(f *Fleet) ErrorList {
	var errs ErrorList
	validateTypeMeta(&errs, f.TypeMeta, KindFleet)
	validateName(&errs, "metadata.name", f.Metadata.Name)
	s := &f.Spec
	if strings.TrimSpace(s.Image) == "" {
		errs.add("spec.image", "required: a node image name or bundle digest (see `herd image ls`)")
	}

	r := s.Replicas
	if r.Min != nil && *r.Min < 0 {
		errs.add("spec.replicas.min", "must be >= 0 (got %d)", *r.Min)
	}
	if r.Max != nil && *r.Max < 1 {
		errs.add("spec.replicas.max", "must be >= 1 (got %d)", *r.Max)
	}
	if r.Desired != nil && *r.Desired < 0 {
		errs.add("spec.replicas.desired", "must be >= 0 (got %d)", *r.Desired)
	}
	if r.Min != nil && r.Max != nil && *r.Min > *r.Max {
		errs.add("spec.replicas.min", "must be <= spec.replicas.max (got %d > %d)", *r.Min, *r.Max)
	}
	if r.Desired != nil && r.Min != nil && r.Max != nil && *r.Min <= *r.Max && *r.Desired >= 0 &&
		(*r.Desired < *r.Min || *r.Desired > *r.Max) {
		errs.add("spec.replicas.desired", "must be between spec.replicas.min and spec.replicas.max (got %d, not in [%d, %d])", *r.Desired, *r.Min, *r.Max)
	}

	ports := map[int32]int{}
	names := map[string]int{}
	for i, l := range s.Listeners {
		p := fmt.Sprintf("spec.listeners[%d]", i)
		validatePort(&errs, p+".port", l.Port, true)
		validatePort(&errs, p+".instancePort", l.InstancePort, true)
		if l.Protocol != ProtocolHTTP && l.Protocol != ProtocolTCP {
			errs.add(p+".protocol", "must be \"http\" or \"tcp\" (got %q)", l.Protocol)
		}
		if j, dup := ports[l.Port]; dup && l.Port != 0 {
			errs.add(p+".port", "duplicates spec.listeners[%d].port (%d): each listener needs its own port", j, l.Port)
		}
		ports[l.Port] = i
		if j, dup := names[l.Name]; dup {
			errs.add(p+".name", "duplicates spec.listeners[%d].name (%q)", j, l.Name)
		}
		names[l.Name] = i
		validateListenerTLS(&errs, p, l)
	}

	h := s.HealthCheck
	if !strings.HasPrefix(h.Path, "/") {
		errs.add("spec.healthCheck.path", "must start with '/' (got %q)", h.Path)
	}
	validatePort(&errs, "spec.healthCheck.port", h.Port, false)
	if h.Interval != nil && h.Interval.Duration <= 0 {
		errs.add("spec.healthCheck.interval", "must be > 0 (got %s)", h.Interval.Duration)
	}
	if h.Timeout != nil && h.Timeout.Duration <= 0 {
		errs.add("spec.healthCheck.timeout", "must be > 0 (got %s)", h.Timeout.Duration)
	}
	if h.Interval != nil && h.Timeout != nil && h.Interval.Duration > 0 && h.Timeout.Duration > h.Interval.Duration {
		errs.add("spec.healthCheck.interval", "must be >= spec.healthCheck.timeout (got %s < %s): a check must finish before the next starts", h.Interval.Duration, h.Timeout.Duration)
	}
	if h.HealthyThreshold < 1 || h.HealthyThreshold > 100 {
		errs.add("spec.healthCheck.healthyThreshold", "must be between 1 and 100 (got %d)", h.HealthyThreshold)
	}
	if h.UnhealthyThreshold < 1 || h.UnhealthyThreshold > 100 {
		errs.add("spec.healthCheck.unhealthyThreshold", "must be between 1 and 100 (got %d)", h.UnhealthyThreshold)
	}
	if h.GracePeriod != nil && h.GracePeriod.Duration < 0 {
		errs.add("spec.healthCheck.gracePeriod", "must be >= 0 (got %s)", h.GracePeriod.Duration)
	}

	if a := s.Autoscaling; a != nil {
		switch a.Metric {
		case MetricRequestsPerSecond, MetricCPU, MetricLatencyP95:
		default:
			errs.add("spec.autoscaling.metric", "must be one of requestsPerSecond, cpu, latencyP95 (got %q)", a.Metric)
		}
		if a.Target <= 0 {
			errs.add("spec.autoscaling.target", "must be > 0 (got %g)", a.Target)
		}
		if a.ScaleInStabilization != nil && a.ScaleInStabilization.Duration < 0 {
			errs.add("spec.autoscaling.scaleInStabilization", "must be >= 0 (got %s)", a.ScaleInStabilization.Duration)
		}
		if a.WarmPool < 0 {
			errs.add("spec.autoscaling.warmPool", "must be >= 0 (got %d)", a.WarmPool)
		}
	}

	ro := s.Rollout
	switch ro.Strategy {
	case StrategyRolling, StrategyBlueGreen, StrategyCanary:
	default:
		errs.add("spec.rollout.strategy", "must be one of Rolling, BlueGreen, Canary (got %q)", ro.Strategy)
	}
	if ro.MaxSurge != nil && *ro.MaxSurge < 0 {
		errs.add("spec.rollout.maxSurge", "must be >= 0 (got %d)", *ro.MaxSurge)
	}
	if ro.MaxUnavailable != nil && *ro.MaxUnavailable < 0 {
		errs.add("spec.rollout.maxUnavailable", "must be >= 0 (got %d)", *ro.MaxUnavailable)
	}
	if ro.MaxSurge != nil && ro.MaxUnavailable != nil && *ro.MaxSurge == 0 && *ro.MaxUnavailable == 0 {
		errs.add("spec.rollout.maxSurge", "maxSurge and maxUnavailable cannot both be 0: a rolling update could never make progress")
	}
	if ro.RollbackWindow != nil && ro.RollbackWindow.Duration < 0 {
		errs.add("spec.rollout.rollbackWindow", "must be >= 0 (got %s)", ro.RollbackWindow.Duration)
	}
	prev := int32(0)
	for i, st := range ro.Steps {
		p := fmt.Sprintf("spec.rollout.steps[%d]", i)
		if st.Weight < 1 || st.Weight > 100 {
			errs.add(p+".weight", "must be between 1 and 100 (got %d)", st.Weight)
		} else if st.Weight <= prev {
			errs.add(p+".weight", "must be greater than the previous step's weight (got %d after %d)", st.Weight, prev)
		}
		prev = st.Weight
		if st.Pause != nil && st.Pause.Duration < 0 {
			errs.add(p+".pause", "must be >= 0 (got %s)", st.Pause.Duration)
		}
	}
	if len(ro.Steps) > 0 && ro.Strategy != StrategyCanary {
		errs.add("spec.rollout.steps", "only used with strategy Canary (strategy is %s): remove steps or set strategy: Canary", ro.Strategy)
	}
	if a := ro.Analysis; a != nil {
		if a.MaxErrorRateRatio <= 0 {
			errs.add("spec.rollout.analysis.maxErrorRateRatio", "must be > 0 (got %g)", a.MaxErrorRateRatio)
		}
		if a.MaxLatencyRatio <= 0 {
			errs.add("spec.rollout.analysis.maxLatencyRatio", "must be > 0 (got %g)", a.MaxLatencyRatio)
		}
		if a.MinRequests < 1 {
			errs.add("spec.rollout.analysis.minRequests", "must be >= 1 (got %d)", a.MinRequests)
		}
	}

	regionNames := map[string]int{}
	defaults := 0
	for i, rg := range s.Regions {
		p := fmt.Sprintf("spec.regions[%d]", i)
		validateName(&errs, p+".name", rg.Name)
		if j, dup := regionNames[rg.Name]; dup {
			errs.add(p+".name", "duplicates spec.regions[%d].name (%q)", j, rg.Name)
		}
		regionNames[rg.Name] = i
		if rg.Provider == "" {
			errs.add(p+".provider", "required: a provider such as \"local\" or \"fake\"")
		}
		if rg.Default {
			defaults++
		}
	}
	if defaults > 1 {
		errs.add("spec.regions", "exactly one region may be the default (got %d with default: true)", defaults)
	}
	errs.addFieldErrors(validateRegions(s), "name a region of spec.regions")
	errs = append(errs, validateGlobal(s)...)
	errs.addFieldErrors(validateTenancy(s), "use Rolling: each tenant's instances are replaced on their own")
	errs.addFieldErrors(validateDiscovery(s), "")
	return errs
}

// ValidateNodeImage checks a defaulted NodeImage and returns every problem found. Paths are not
// checked for existence here: the image builder does that, relative to the file.
func ValidateNodeImage(n *NodeImage) ErrorList {
	var errs ErrorList
	validateTypeMeta(&errs, n.TypeMeta, KindNodeImage)
	validateName(&errs, "metadata.name", n.Metadata.Name)
	switch n.Spec.Kubernetes.Distribution {
	case "upstream", "k3s":
	default:
		errs.add("spec.kubernetes.distribution", "must be \"upstream\" or \"k3s\" (got %q)", n.Spec.Kubernetes.Distribution)
	}
	if !strings.HasPrefix(n.Spec.Kubernetes.Version, "v") {
		errs.add("spec.kubernetes.version", "must be a version such as \"v1.33.13\" (got %q)", n.Spec.Kubernetes.Version)
	}
	if n.Spec.Manifests == "" && n.Spec.Kustomize == "" && len(n.Spec.Charts) == 0 {
		errs.add("spec.manifests", "required unless spec.kustomize or spec.charts is set: a directory of Kubernetes YAML files, relative to this file")
	}
	releases := map[string]int{}
	for i, c := range n.Spec.Charts {
		p := fmt.Sprintf("spec.charts[%d]", i)
		validateName(&errs, p+".name", c.Name)
		if j, dup := releases[c.Name]; dup && c.Name != "" {
			errs.add(p+".name", "duplicates spec.charts[%d].name (%q): every release needs its own name", j, c.Name)
		}
		releases[c.Name] = i
		if c.Chart == "" {
			errs.add(p+".chart", "required: a chart directory or a packaged chart (.tgz), relative to this file")
		}
		validateName(&errs, p+".namespace", c.Namespace)
		for k, f := range c.ValuesFiles {
			if f == "" {
				errs.add(fmt.Sprintf("%s.valuesFiles[%d]", p, k), "must not be empty: give a values file, relative to this file")
			}
		}
	}
	seen := map[string]int{}
	for i, im := range n.Spec.Images {
		p := fmt.Sprintf("spec.images[%d]", i)
		if im.Name == "" {
			errs.add(p+".name", "required: the image reference pods use, e.g. \"hello:v1\"")
		}
		if j, dup := seen[im.Name]; dup && im.Name != "" {
			errs.add(p+".name", "duplicates spec.images[%d].name (%q)", j, im.Name)
		}
		seen[im.Name] = i
		if (im.Main == "") == (im.Tar == "") {
			errs.add(p, "set exactly one of main (a Go main package) and tar (an image tar file)")
		}
	}
	return errs
}

// validateListenerTLS checks a listener's tls: files or the local CA, on an http listener.
func validateListenerTLS(errs *ErrorList, p string, l Listener) {
	t := l.TLS
	if t == nil {
		return
	}
	p += ".tls"
	if l.Protocol == ProtocolTCP {
		errs.add(p, "is for protocol http listeners: a tcp listener forwards bytes as they come (remove tls, or set protocol: http)")
	}
	files := t.CertFile != "" || t.KeyFile != ""
	switch {
	case files && t.LocalCA:
		errs.add(p+".localCA", "cannot be set with certFile and keyFile: choose files or the local CA")
	case !files && !t.LocalCA:
		errs.add(p, "needs certFile and keyFile, or localCA: true")
	case files:
		for _, f := range []struct{ name, path, what string }{
			{"certFile", t.CertFile, "the PEM certificate chain"}, {"keyFile", t.KeyFile, "the PEM private key"},
		} {
			if f.path == "" {
				errs.add(p+"."+f.name, "required with the other file: the path of %s", f.what)
			} else if !filepath.IsAbs(f.path) {
				errs.add(p+"."+f.name, "must be an absolute path on the host herd up runs on (got %q)", f.path)
			}
		}
	}
}
