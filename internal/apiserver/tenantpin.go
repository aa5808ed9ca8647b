package apiserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// PinRequest pins a tenant of a fleet with tenancy to a node image (herd rollout pin).
type PinRequest struct {
	// Image names the image (a NodeImage name or a digest); "" keeps the tenant on the image the
	// fleet boots now (or on its pin, if it has one).
	Image string `json:"image,omitempty"`
}

// pinTenant records a pin of one tenant (Fleet.Requests.TenantPins, of which the API is the
// only writer): the controller gives that tenant's instances the pinned image, rolling them
// within the fleet's maxSurge and maxUnavailable, while the other tenants follow the fleet. A
// canary can be one customer: pin that tenant to the new image, then apply the new image to the
// fleet (or unpin) once it is good.
func (s *Server) pinTenant(w http.ResponseWriter, r *http.Request) {
	name, tenant := r.PathValue("name"), r.PathValue("tenant")
	var req PinRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("malformed pin request: %w", err))
		return
	}
	f, err := store.UpdateFleetRequests(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet, reqs *v1alpha1.FleetRequests) (bool, error) {
		if err := tenantOfFleet(f, tenant); err != nil {
			return false, err
		}
		cur, pinned := reqs.TenantPins[tenant]
		pin := v1alpha1.TenantPin{Ref: f.Spec.Image, Digest: f.BootImage(), At: s.opts.Clock.Now().UTC()}
		if f.Pinned != nil && f.Pinned.Ref != "" {
			pin.Ref = f.Pinned.Ref
		}
		switch {
		case req.Image == "" && pinned:
			return false, nil // already on an image of its own
		case req.Image != "":
			defaulted := *f
			defaulted.Spec.Image = req.Image
			v1alpha1.SetFleetDefaults(&defaulted, s.opts.DefaultProvider)
			p, err := s.opts.Images.Pin(&defaulted, v1alpha1.PinnedByApply, s.opts.Clock.Now())
			if err != nil {
				return false, refuse(http.StatusUnprocessableEntity, "--image: %w", err)
			}
			pin.Ref, pin.Digest = req.Image, p.Digest
		}
		if pinned && cur.Ref == pin.Ref && cur.Digest == pin.Digest {
			return false, nil
		}
		reqs.TenantPins = cloneWith(reqs.TenantPins, tenant, &pin)
		return true, nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	p := f.Requests.TenantPins[tenant]
	s.log.Info("tenant pinned", "fleet", name, "tenant", tenant, "image", p.Ref, "digest", p.Digest)
	writeJSON(w, http.StatusOK, f)
}

// unpinTenant removes a tenant's pin: its instances roll back to the fleet's image. A tenant
// without a pin is left as it is.
func (s *Server) unpinTenant(w http.ResponseWriter, r *http.Request) {
	name, tenant := r.PathValue("name"), r.PathValue("tenant")
	f, err := store.UpdateFleetRequests(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet, reqs *v1alpha1.FleetRequests) (bool, error) {
		if err := tenantOfFleet(f, tenant); err != nil {
			return false, err
		}
		if _, pinned := reqs.TenantPins[tenant]; !pinned {
			return false, nil
		}
		reqs.TenantPins = cloneWith(reqs.TenantPins, tenant, nil)
		return true, nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("tenant unpinned", "fleet", name, "tenant", tenant)
	writeJSON(w, http.StatusOK, f)
}

// tenantOfFleet refuses a tenant that the fleet would not serve: a fleet without spec.tenancy, a
// name that is no DNS label, or a tenant neither listed nor accepted by open.
func tenantOfFleet(f *v1alpha1.Fleet, tenant string) error {
	name := f.Metadata.Name
	tn := f.Spec.Tenancy
	switch {
	case tn == nil:
		return refuse(http.StatusConflict, "fleet %q has no spec.tenancy: only a fleet with tenants pins one (herd rollout undo or herd apply change the whole fleet)", name)
	case len(validation.IsDNS1123Label(tenant)) > 0:
		return refuse(http.StatusUnprocessableEntity, "--tenant %q is not a tenant name (a DNS label: lower-case letters, digits and '-')", tenant)
	case !tn.Open && !slices.Contains(tn.Tenants, tenant):
		return refuse(http.StatusUnprocessableEntity, "--tenant %q is not in spec.tenancy.tenants of fleet %q (%v): add it there and apply, or set spec.tenancy.open", tenant, name, tn.Tenants)
	}
	return nil
}

// cloneWith returns a copy of pins with tenant's pin set to pin, or removed when pin is nil; nil
// when none is left. The stored map is never changed in place.
func cloneWith(pins map[string]v1alpha1.TenantPin, tenant string, pin *v1alpha1.TenantPin) map[string]v1alpha1.TenantPin {
	out := maps.Clone(pins)
	if out == nil {
		out = map[string]v1alpha1.TenantPin{}
	}
	if pin != nil {
		out[tenant] = *pin
	} else {
		delete(out, tenant)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
