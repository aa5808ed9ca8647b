package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/image/bundle"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/store"
)

// ImageStore is herd up's store of node image bundles, as the API lists and removes them.
type ImageStore interface {
	Resolve(ref string) (string, error)
	List() ([]bundle.Bundle, error)
	Remove(ref string) error
}

// ImageInfo is one bundle of the image store and the fleets that use it.
type ImageInfo struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// UsedBy names each fleet's use of it: pinned, a revision, an instance, or (prune) its history.
	UsedBy []string `json:"usedBy,omitempty"`
}

// PruneResult lists what a prune removed and the bytes it freed.
type PruneResult struct {
	Removed []ImageInfo `json:"removed"`
	Freed   int64       `json:"freed"`
}

func (s *Server) routeImages() {
	s.mux.HandleFunc("GET /v1/images", s.listImages)
	s.mux.HandleFunc("DELETE /v1/images/{ref}", s.removeImage)
	s.mux.HandleFunc("POST /v1/images/prune", s.pruneImages)
}

// images lists the store's bundles with their uses; history entries count within keep.
func (s *Server) images(ctx context.Context, keep int) ([]ImageInfo, error) {
	if s.opts.ImageStore == nil {
		return nil, refuse(http.StatusNotImplemented, "this control plane keeps no node images")
	}
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, s.opts.Store, store.Fleets)
	if err != nil {
		return nil, err
	}
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, s.opts.Store, store.Instances)
	if err != nil {
		return nil, err
	}
	uses := imagepin.Uses(fleets, insts, keep)
	bundles, err := s.opts.ImageStore.List()
	if err != nil {
		return nil, err
	}
	out := make([]ImageInfo, 0, len(bundles))
	for _, b := range bundles {
		out = append(out, ImageInfo{Name: b.Config.Name, Digest: b.Digest, Size: b.Size, Created: b.Created, UsedBy: uses[b.Digest]})
	}
	return out, nil
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	out, err := s.images(r.Context(), 0)
	if err != nil {
		s.imageError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// removeImage removes one bundle, refused while a fleet's pin, revision or instance uses it.
func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	im, err := s.imageToRemove(r.Context(), r.PathValue("ref"))
	if err == nil {
		err = s.opts.ImageStore.Remove(im.Digest)
	}
	if err != nil {
		s.imageError(w, r, err)
		return
	}
	s.log.Info("node image removed", "digest", im.Digest, "name", im.Name, "size", im.Size)
	writeJSON(w, http.StatusOK, im)
}

// imageToRemove finds the bundle ref names, refusing it while anything uses it.
func (s *Server) imageToRemove(ctx context.Context, ref string) (ImageInfo, error) {
	all, err := s.images(ctx, 0)
	if err != nil {
		return ImageInfo{}, err
	}
	digest, err := s.opts.ImageStore.Resolve(ref)
	if errors.Is(err, imagepin.ErrNotFound) {
		return ImageInfo{}, refuse(http.StatusNotFound, "%w", err)
	} else if err != nil {
		return ImageInfo{}, err
	}
	for _, im := range all {
		if im.Digest != digest {
			continue
		}
		if len(im.UsedBy) > 0 {
			return ImageInfo{}, refuse(http.StatusConflict, "node image %s (%s) is in use by %s: apply those fleets with another image first", digest, im.Name, strings.Join(im.UsedBy, ", "))
		}
		return im, nil
	}
	return ImageInfo{}, refuse(http.StatusNotFound, "node image %s is not in the store", digest)
}

// pruneImages removes every bundle no fleet uses, counting the last keep entries of each fleet's
// rollout history as uses.
func (s *Server) pruneImages(w http.ResponseWriter, r *http.Request) {
	keep, err := strconv.Atoi(r.URL.Query().Get("keep"))
	if err != nil || keep < 0 {
		s.imageError(w, r, refuse(http.StatusBadRequest, "keep=%q: want a count >= 0 of history entries to keep each fleet's images of", r.URL.Query().Get("keep")))
		return
	}
	all, err := s.images(r.Context(), keep)
	if err != nil {
		s.imageError(w, r, err)
		return
	}
	res := PruneResult{Removed: []ImageInfo{}}
	for _, im := range all {
		if len(im.UsedBy) > 0 {
			continue
		}
		if err := s.opts.ImageStore.Remove(im.Digest); err != nil {
			s.imageError(w, r, fmt.Errorf("prune: remove %s: %w (removed before it: %d)", im.Digest, err, len(res.Removed)))
			return
		}
		res.Removed = append(res.Removed, im)
		res.Freed += im.Size
	}
	s.log.Info("node images pruned", "removed", len(res.Removed), "freed", res.Freed)
	writeJSON(w, http.StatusOK, res)
}

// imageError answers for a failed image request: a refusal with its code, anything else as a
// failure of the image store or the store.
func (s *Server) imageError(w http.ResponseWriter, r *http.Request, err error) {
	var rf *refusal
	if errors.As(err, &rf) {
		s.fail(w, r, rf.code, rf.err)
		return
	}
	s.fail(w, r, http.StatusInternalServerError, err)
}
