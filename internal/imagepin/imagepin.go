// Package imagepin resolves a fleet's spec.image to the node image bundle its instances boot, at
// the moment a user asks for it (herd apply, herd rollout restart), and keeps the answer in the
// fleet (Fleet.Pinned): a later build of the same name changes no fleet until it is applied again.
// It also says which fleets use which bundle, so that bundles a fleet may still boot are never
// removed.
package imagepin

import (
	"errors"
	"fmt"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// ErrNotFound is wrapped by Images.Resolve when no built image matches a reference.
var ErrNotFound = errors.New("node image not found")

// Images is the store of built node images, as pinning sees it.
type Images interface {
	// Resolve returns the digest ref names now (a NodeImage name, a digest or a digest's unique
	// prefix), or an error wrapping ErrNotFound.
	Resolve(ref string) (string, error)
}

// NotFound marks err, an image store's own error for a reference it does not know, as
// ErrNotFound, keeping its words.
func NotFound(err error) error { return notFound{err} }

type notFound struct{ error }

func (e notFound) Is(target error) bool { return target == ErrNotFound }
func (e notFound) Unwrap() error        { return e.error }

// Resolver pins fleets' images.
type Resolver struct {
	// Images resolves references; nil pins every reference as written.
	Images Images
	// Imageless are the providers whose instances boot no node image (the fake provider): a fleet
	// whose regions all run on them may name an image that was never built, which is pinned as
	// written.
	Imageless map[string]bool
}

// Pin resolves f's spec.image now, for by (v1alpha1.PinnedBy*). An image that names no built
// bundle is an error that names spec.image and the fix, unless every region of f runs on an
// imageless provider. f must be defaulted (its regions' providers filled in).
func (r Resolver) Pin(f *v1alpha1.Fleet, by string, now time.Time) (*v1alpha1.PinnedImage, error) {
	ref := f.Spec.Image
	pin := &v1alpha1.PinnedImage{Ref: ref, Digest: ref, By: by, At: now.UTC()}
	if r.Images == nil {
		return pin, nil
	}
	digest, err := r.Images.Resolve(ref)
	switch {
	case err == nil:
		pin.Digest = digest
		return pin, nil
	case errors.Is(err, ErrNotFound) && r.imageless(f):
		return pin, nil
	case errors.Is(err, ErrNotFound):
		return nil, err // the store's words name the reference and the fix
	}
	return nil, fmt.Errorf("resolve spec.image %q: %w", ref, err)
}

// imageless reports whether every region of f runs on a provider that boots no node image.
func (r Resolver) imageless(f *v1alpha1.Fleet) bool {
	if len(f.Spec.Regions) == 0 {
		return false
	}
	for _, rg := range f.Spec.Regions {
		if !r.Imageless[rg.Provider] {
			return false
		}
	}
	return true
}
