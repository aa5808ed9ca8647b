package imagepin

import (
	"sort"

	"herd.dev/herd/api/v1alpha1"
)

// Uses says, for each image (digest), which fleets use it and how ("fleet/web (pinned)"). A live
// use is the fleet's pinned image, a tenant's pin (herd rollout pin), a revision in its status (a
// rollout's revisions among them) or an instance not yet deleted: such an image must not be
// removed. With keep > 0, the images of the first keep entries of each fleet's rollout history
// count too, so that a rollout undo still finds them.
func Uses(fleets []*v1alpha1.Fleet, instances []*v1alpha1.Instance, keep int) map[string][]string {
	seen := map[string]map[string]bool{}
	add := func(image, use string) {
		if image == "" {
			return
		}
		if seen[image] == nil {
			seen[image] = map[string]bool{}
		}
		seen[image][use] = true
	}
	for _, f := range fleets {
		name := "fleet/" + f.Metadata.Name
		add(f.BootImage(), name+" (pinned)")
		for tenant, pin := range f.Requests.TenantPins {
			add(pin.Digest, name+" (tenant "+tenant+" pinned)")
		}
		for _, r := range f.Status.Revisions {
			add(r.Image, name+" (revision "+r.Name+")")
		}
		for i, h := range f.Status.History {
			if i < keep {
				add(h.Image, name+" (history)")
			}
		}
	}
	for _, in := range instances {
		add(in.Spec.Image, "fleet/"+in.Spec.Fleet+" (instance "+in.Metadata.Name+")")
	}
	out := map[string][]string{}
	for image, uses := range seen {
		for u := range uses {
			out[image] = append(out[image], u)
		}
		sort.Strings(out[image])
	}
	return out
}
