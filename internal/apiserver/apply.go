package apiserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// ApplyRequest carries the fleets and distributions of one file; they are stored together or not
// at all.
type ApplyRequest struct {
	Fleets        []v1alpha1.Fleet        `json:"fleets"`
	Distributions []v1alpha1.Distribution `json:"distributions,omitempty"`
}

// ApplyResult says what happened to each fleet or distribution: created, configured or unchanged.
type ApplyResult struct {
	// Kind is "distribution" for a distribution, "" for a fleet.
	Kind   string `json:"kind,omitempty"`
	Name   string `json:"name"`
	Result string `json:"result"`
	// Warnings say what of the fleet as written was not applied, and why.
	Warnings []string `json:"warnings,omitempty"`
	// Pinned is the node image the fleet's instances boot once applied.
	Pinned *v1alpha1.PinnedImage `json:"pinned,omitempty"`
}

// applied is one fleet of an apply request with what the user wrote before defaults were filled.
type applied struct {
	fleet *v1alpha1.Fleet
	// desiredGiven is whether the user set spec.replicas.desired.
	desiredGiven bool
	// pin is spec.image resolved now.
	pin *v1alpha1.PinnedImage
	// warnings are what apply says of the fleet as written, whatever is stored.
	warnings []string
}

func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	var req ApplyRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("malformed apply request: %w", err))
		return
	}
	if len(req.Fleets) == 0 && len(req.Distributions) == 0 {
		s.fail(w, r, http.StatusBadRequest, errors.New("apply request holds no fleet and no distribution"))
		return
	}
	if len(req.Distributions) > 0 && s.opts.Edges == nil {
		s.fail(w, r, http.StatusBadRequest, errors.New("this control plane runs no edge locations: serve the distribution with `herd edge -f FILE`"))
		return
	}
	fleets := make([]applied, len(req.Fleets))
	for i := range req.Fleets {
		f := &req.Fleets[i]
		fleets[i] = applied{fleet: f, desiredGiven: f.Spec.Replicas.Desired != nil}
		if w := v1alpha1.DiscoveryWarning(f, s.discoveryZone()); w != "" {
			fleets[i].warnings = append(fleets[i].warnings, w)
		}
		f.Status, f.Requests = v1alpha1.FleetStatus{}, v1alpha1.FleetRequests{}
		v1alpha1.SetFleetDefaults(f, s.opts.DefaultProvider)
	}
	if problems := s.validateApply(req.Fleets); len(problems) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, ErrorBody{Error: "invalid fleet spec", Fields: problems})
		return
	}
	if problems := s.pinApplied(fleets); len(problems) > 0 {
		writeJSON(w, http.StatusUnprocessableEntity, ErrorBody{Error: "invalid fleet spec", Fields: problems})
		return
	}
	// Read-modify-write of all fleets in one transaction; a concurrent writer makes it retry.
	for attempt := 0; ; attempt++ {
		plan, err := s.planApply(r.Context(), fleets)
		if err != nil {
			s.storeError(w, r, "fleets", err)
			return
		}
		if len(req.Distributions) > 0 && len(plan.problems) == 0 {
			dplan, err := s.planDistributions(r.Context(), slices.Clone(req.Distributions), req.Fleets)
			if err != nil {
				s.storeError(w, r, "distributions", err)
				return
			}
			plan.results, plan.ops, plan.problems = append(plan.results, dplan.results...), append(plan.ops, dplan.ops...), dplan.problems
		}
		if len(plan.problems) > 0 {
			writeJSON(w, http.StatusUnprocessableEntity, ErrorBody{Error: "invalid fleet spec", Fields: plan.problems})
			return
		}
		if len(plan.ops) > 0 {
			if _, err := s.opts.Store.Txn(r.Context(), plan.ops...); err != nil {
				// Another apply wrote one of these fleets or claims since they were read: read
				// again, and meet its fleets in the clash checks.
				if store.IsOpError(err) && attempt < 5 {
					continue
				}
				s.storeError(w, r, "fleets", err)
				return
			}
		}
		for _, res := range plan.results {
			s.log.Info("applied", "kind", cmp.Or(res.Kind, "fleet"), "name", res.Name, "result", res.Result, "warnings", len(res.Warnings))
		}
		writeJSON(w, http.StatusOK, plan.results)
		return
	}
}

// validateApply checks each fleet on its own (with its defaults), its regions' providers and
// options, and the fleets of the request against each other.
func (s *Server) validateApply(fleets []v1alpha1.Fleet) []FieldProblem {
	var problems []FieldProblem
	seen := map[string]bool{}
	for i := range fleets {
		f := &fleets[i]
		errs := v1alpha1.ValidateFleet(f)
		for j, rg := range f.Spec.Regions {
			if rg.Provider != "" && !slices.Contains(s.opts.Providers, rg.Provider) {
				errs = append(errs, v1alpha1.FieldError{
					Field:   fmt.Sprintf("spec.regions[%d].provider", j),
					Message: fmt.Sprintf("provider %q is not running in this control plane (it runs %s): change the region's provider or start herd up --provider %s", rg.Provider, strings.Join(s.opts.Providers, ", "), rg.Provider),
				})
				continue
			}
			if v := s.opts.OptionValidators[rg.Provider]; v != nil {
				errs = append(errs, fieldErrors(v.ValidateOptions(field.NewPath("spec", "regions").Index(j).Child("options"), rg.Options))...)
			}
		}
		errs = append(errs, listenerCertificates(f)...)
		if seen[f.Metadata.Name] {
			errs = append(errs, v1alpha1.FieldError{Field: "metadata.name", Message: fmt.Sprintf("fleet %q appears twice in one apply", f.Metadata.Name)})
		}
		seen[f.Metadata.Name] = true
		for _, e := range errs {
			problems = append(problems, FieldProblem{Document: i + 1, Field: e.Field, Message: e.Message})
		}
	}
	problems = append(problems, listenerClashes(fleets, nil)...)
	problems = append(problems, hostnameClashes(fleets, nil)...)
	return append(problems, discoveryClashes(fleets, nil)...)
}

// pinApplied resolves each applied fleet's spec.image to the bundle its instances will boot: a
// name is resolved when it is applied, never later. An image that was never built is refused.
func (s *Server) pinApplied(fleets []applied) []FieldProblem {
	var problems []FieldProblem
	now := s.opts.Clock.Now()
	for i := range fleets {
		pin, err := s.opts.Images.Pin(fleets[i].fleet, v1alpha1.PinnedByApply, now)
		if err != nil {
			problems = append(problems, FieldProblem{Document: i + 1, Field: "spec.image", Message: err.Error()})
			continue
		}
		fleets[i].pin = pin
	}
	return problems
}

// listenerClashes refuses a load-balancer port claimed by two fleets: every fleet's listeners
// share the load balancer's address, so the second would be refused there, at run time, where
// only the log would say so. fleets are the applied ones; stored are those in the store, of which
// those not applied keep their ports.
func listenerClashes(fleets []v1alpha1.Fleet, stored []*v1alpha1.Fleet) []FieldProblem {
	type claim struct {
		fleet, listener string
		doc             int // 1-based document of the apply; 0 for a stored fleet
	}
	claims := map[int32]claim{}
	var problems []FieldProblem
	for i := range fleets {
		f := &fleets[i]
		for j, l := range f.Spec.Listeners {
			c, taken := claims[l.Port]
			if taken && c.fleet != f.Metadata.Name {
				problems = append(problems, FieldProblem{Document: i + 1, Field: fmt.Sprintf("spec.listeners[%d].port", j),
					Message: fmt.Sprintf("port %d is also claimed by fleet %q (document %d of this apply): give each fleet its own load-balancer port", l.Port, c.fleet, c.doc)})
				continue
			}
			claims[l.Port] = claim{f.Metadata.Name, l.Name, i + 1}
		}
	}
	appliedIdx := map[string]int{}
	for i := range fleets {
		appliedIdx[fleets[i].Metadata.Name] = i
	}
	for _, o := range stored {
		if _, ok := appliedIdx[o.Metadata.Name]; ok {
			continue // its ports are the ones applied now
		}
		for _, l := range o.Spec.Listeners {
			c, taken := claims[l.Port]
			if !taken || c.doc == 0 {
				continue
			}
			f := &fleets[c.doc-1]
			j := slices.IndexFunc(f.Spec.Listeners, func(x v1alpha1.Listener) bool { return x.Port == l.Port })
			problems = append(problems, FieldProblem{Document: c.doc, Field: fmt.Sprintf("spec.listeners[%d].port", j),
				Message: fmt.Sprintf("port %d is already claimed by fleet %q (listener %s): choose another port, or remove that listener from fleet %q first", l.Port, o.Metadata.Name, l.Name, o.Metadata.Name)})
		}
	}
	return problems
}

// fieldErrors turns apimachinery's field errors into the API's own.
func fieldErrors(errs field.ErrorList) []v1alpha1.FieldError {
	out := make([]v1alpha1.FieldError, 0, len(errs))
	for _, e := range errs {
		out = append(out, v1alpha1.FieldError{Field: e.Field, Message: e.ErrorBody()})
	}
	return out
}

// applyPlan is what an apply writes and answers.
type applyPlan struct {
	results []ApplyResult
	ops     []store.Op
	// problems are refusals that depend on what is stored: a listener port another fleet holds.
	problems []FieldProblem
}

// planApply works out, from the stored fleets, what each applied fleet becomes: its generation
// (store.FleetGeneration), its status and requests kept, and spec.replicas.desired kept when
// autoscaling owns it; and the claims of the fleets it writes (claims.go).
func (s *Server) planApply(ctx context.Context, fleets []applied) (applyPlan, error) {
	var plan applyPlan
	claims, err := readClaims(ctx, s.opts.Store)
	if err != nil {
		return plan, err
	}
	stored, _, err := store.ListObjects[v1alpha1.Fleet](ctx, s.opts.Store, store.Fleets)
	if err != nil {
		return plan, err
	}
	byName := map[string]*v1alpha1.Fleet{}
	for _, f := range stored {
		byName[f.Metadata.Name] = f
	}
	next := make([]v1alpha1.Fleet, len(fleets))
	for i, a := range fleets {
		next[i] = *a.fleet
	}
	plan.problems = append(listenerClashes(next, stored), hostnameClashes(next, stored)...)
	plan.problems = append(plan.problems, discoveryClashes(next, stored)...)
	if len(plan.problems) > 0 {
		return plan, nil
	}
	now := time.Now().UTC()
	var written []*v1alpha1.Fleet
	for i, a := range fleets {
		f := &next[i]
		cur := byName[f.Metadata.Name]
		res := ApplyResult{Name: f.Metadata.Name, Warnings: a.warnings}
		if cur != nil && f.Spec.Autoscaling != nil {
			res.Warnings = append(res.Warnings, keepAutoscaledDesired(f, cur, a.desiredGiven)...)
		}
		gen, err := store.FleetGeneration(cur, &f.Spec, a.pin)
		if err != nil {
			return plan, err
		}
		// The pin stays as it was while spec.image names what it named.
		f.Pinned = a.pin
		if cur != nil && cur.Pinned != nil && cur.Pinned.Ref == a.pin.Ref && cur.Pinned.Digest == a.pin.Digest {
			f.Pinned = cur.Pinned
		}
		switch {
		case cur == nil:
			f.Metadata.CreationTimestamp = &now
			f.Metadata.ResourceVersion = 0
			res.Result = "created"
		case gen == cur.Metadata.Generation && f.Pinned == cur.Pinned && reflect.DeepEqual(cur.Metadata.Labels, f.Metadata.Labels):
			res.Result = "unchanged"
		default:
			f.Metadata.CreationTimestamp = cur.Metadata.CreationTimestamp
			f.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
			f.Status, f.Requests = cur.Status, cur.Requests
			res.Result = "configured"
		}
		res.Pinned = f.Pinned
		plan.results = append(plan.results, res)
		if res.Result == "unchanged" {
			continue
		}
		f.Metadata.Generation = gen
		op, err := store.PutOp(store.Fleets, f)
		if err != nil {
			return plan, err
		}
		plan.ops = append(plan.ops, op)
		written = append(written, f)
	}
	if len(written) == 0 {
		return plan, nil
	}
	claimOps, err := claims.ops(written)
	if err != nil {
		return plan, err
	}
	plan.ops = append(plan.ops, claimOps...)
	return plan, nil
}

// keepAutoscaledDesired gives f, an autoscaled fleet, the desired count cur has (within f's
// bounds): the autoscaler and `herd scale` own it, and an apply from the same file, as GitOps tools
// do on every sync, must not undo their work. A desired count the user wrote is ignored, with a
// warning that says why.
func keepAutoscaledDesired(f, cur *v1alpha1.Fleet, given bool) []string {
	warnings := keepAutoscaledRegionDesired(f, cur)
	if cur.Spec.Replicas.Desired == nil {
		return warnings
	}
	r := &f.Spec.Replicas
	written := *r.Desired
	keep := min(max(*cur.Spec.Replicas.Desired, *r.Min), *r.Max)
	r.Desired = &keep
	if !given {
		return warnings
	}
	return append(warnings, fmt.Sprintf("spec.replicas.desired (%d) ignored: spec.autoscaling is set, so the autoscaler owns the desired count, which stays %d; bound it with spec.replicas.min and max, or remove spec.replicas.desired from the file to silence this warning", written, keep))
}

// keepAutoscaledRegionDesired does for each region of f what keepAutoscaledDesired does for the
// fleet: a fleet in several regions is autoscaled region by region, in
// spec.regions[].replicas.desired, which an apply keeps (within the region's bounds) for every
// region cur has a count for.
func keepAutoscaledRegionDesired(f, cur *v1alpha1.Fleet) []string {
	var warnings []string
	for i := range f.Spec.Regions {
		rg := &f.Spec.Regions[i]
		var kept *int32
		for _, c := range cur.Spec.Regions {
			if c.Name == rg.Name && c.Replicas != nil && c.Replicas.Desired != nil {
				kept = c.Replicas.Desired
			}
		}
		if kept == nil {
			continue
		}
		written := rg.Replicas != nil && rg.Replicas.Desired != nil
		if rg.Replicas == nil {
			rg.Replicas = &v1alpha1.Replicas{}
		} else {
			cp := *rg.Replicas
			rg.Replicas = &cp
		}
		rg.Replicas.Desired = nil
		bounds := f.RegionReplicas(rg.Name)
		keep := min(max(*kept, *bounds.Min), *bounds.Max)
		if written {
			warnings = append(warnings, fmt.Sprintf("spec.regions[%d].replicas.desired ignored: spec.autoscaling is set, so the autoscaler owns each region's desired count, which stays %d; bound it with the region's min and max, or remove it from the file to silence this warning", i, keep))
		}
		rg.Replicas.Desired = &keep
	}
	return warnings
}

// listenerCertificates refuses a listener whose certificate and key files do not load as a pair
// here, on the host the load balancer reads them on: otherwise the load balancer would refuse the
// listener at run time, where only the log would say so.
func listenerCertificates(f *v1alpha1.Fleet) []v1alpha1.FieldError {
	var errs []v1alpha1.FieldError
	for i, l := range f.Spec.Listeners {
		if l.TLS == nil || l.TLS.CertFile == "" || l.TLS.KeyFile == "" || !filepath.IsAbs(l.TLS.CertFile) || !filepath.IsAbs(l.TLS.KeyFile) {
			continue // none, or ValidateFleet said what is missing
		}
		if _, err := tls.LoadX509KeyPair(l.TLS.CertFile, l.TLS.KeyFile); err != nil {
			errs = append(errs, v1alpha1.FieldError{Field: fmt.Sprintf("spec.listeners[%d].tls", i),
				Message: fmt.Sprintf("certFile and keyFile do not load as a PEM certificate and its key on the host herd up runs on: %v", err)})
		}
	}
	return errs
}
