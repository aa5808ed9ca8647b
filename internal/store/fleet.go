package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"herd.dev/herd/api/v1alpha1"
)

// A fleet's metadata.generation counts changes to its desired state, its spec and the image it
// boots (Fleet.Pinned), so that a status can say which it describes (observedGeneration). The
// rule lives here, once: every writer of a fleet's spec or pinned image goes through
// FleetGeneration, UpdateFleetSpec or UpdateFleetImage, and writers of anything else (the
// controller's status write, UpdateFleetRequests) never touch it.

// FleetGeneration returns the generation a fleet has once its spec is next and it boots pin: 1
// for a new fleet (cur nil), otherwise cur's generation, one more when the spec or the image it
// boots changed. A spec changed when its stored form did, so that nil and empty lists or maps,
// which store alike, are no change.
func FleetGeneration(cur *v1alpha1.Fleet, next *v1alpha1.FleetSpec, pin *v1alpha1.PinnedImage) (int64, error) {
	if cur == nil {
		return 1, nil
	}
	changed, err := specChanged(&cur.Spec, next)
	if err != nil {
		return 0, err
	}
	if changed || cur.BootImage() != (&v1alpha1.Fleet{Spec: *next, Pinned: pin}).BootImage() {
		return cur.Metadata.Generation + 1, nil
	}
	return cur.Metadata.Generation, nil
}

// UpdateFleetImage changes the image a fleet boots with UpdateObject: change sets f.Pinned, and
// may change f.Spec.Image with it (herd rollout undo). Only those two are written back, with the
// generation one higher when either changed what the fleet boots or its spec; an error from
// change ends the update unwritten. It returns the fleet as last read or written.
func UpdateFleetImage(ctx context.Context, s Store, name string, change func(f *v1alpha1.Fleet) error) (*v1alpha1.Fleet, error) {
	return UpdateObject(ctx, s, Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		work := *f
		if err := change(&work); err != nil {
			return false, err
		}
		if work.Spec.Image == f.Spec.Image && reflect.DeepEqual(work.Pinned, f.Pinned) {
			return false, nil
		}
		if work.Spec.Image != f.Spec.Image || work.BootImage() != f.BootImage() {
			f.Metadata.Generation++
		}
		f.Spec.Image, f.Pinned = work.Spec.Image, work.Pinned
		return true, nil
	})
}

func specChanged(a, b *v1alpha1.FleetSpec) (bool, error) {
	ja, err := json.Marshal(a)
	if err != nil {
		return false, fmt.Errorf("encode fleet spec: %w", err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		return false, fmt.Errorf("encode fleet spec: %w", err)
	}
	return !bytes.Equal(ja, jb), nil
}

// cloneSpec returns a deep copy of a spec, through its stored form.
func cloneSpec(s *v1alpha1.FleetSpec) (v1alpha1.FleetSpec, error) {
	var out v1alpha1.FleetSpec
	data, err := json.Marshal(s)
	if err == nil {
		err = json.Unmarshal(data, &out)
	}
	if err != nil {
		return out, fmt.Errorf("copy fleet spec: %w", err)
	}
	return out, nil
}

// UpdateFleetSpec changes a fleet's spec with UpdateObject (read, change, conditional write, again
// on a conflict). change sees a copy of the fleet with a spec of its own, and only that spec is
// written back. The fleet is written, with its generation one higher, only when the spec
// changed; an error from change ends the update unwritten. It returns the fleet as last read or
// written.
func UpdateFleetSpec(ctx context.Context, s Store, name string, change func(*v1alpha1.Fleet) error) (*v1alpha1.Fleet, error) {
	return UpdateObject(ctx, s, Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		work := *f
		spec, err := cloneSpec(&f.Spec)
		if err != nil {
			return false, err
		}
		work.Spec = spec
		if err := change(&work); err != nil {
			return false, err
		}
		changed, err := specChanged(&f.Spec, &work.Spec)
		if err != nil || !changed {
			return false, err
		}
		f.Spec = work.Spec
		f.Metadata.Generation++
		return true, nil
	})
}

// UpdateFleetRequests changes the commands recorded for a fleet (Fleet.Requests) with
// UpdateObject. change sees the fleet as read, to decide, and may change only its requests.
func UpdateFleetRequests(ctx context.Context, s Store, name string, change func(f *v1alpha1.Fleet, r *v1alpha1.FleetRequests) (bool, error)) (*v1alpha1.Fleet, error) {
	return UpdateObject(ctx, s, Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		work := *f
		reqs := f.Requests
		changed, err := change(&work, &reqs)
		if err != nil || !changed {
			return false, err
		}
		f.Requests = reqs
		return true, nil
	})
}
