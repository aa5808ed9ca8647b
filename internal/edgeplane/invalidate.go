package edgeplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Invalidation is one request to drop a Distribution's objects, as stored.
type Invalidation struct {
	Distribution string `json:"distribution"`
	// Paths are patterns matched against each stored object's path, and its path with the query:
	// '*' any run of characters, '?' one.
	Paths     []string  `json:"paths"`
	CreatedAt time.Time `json:"createdAt"`
}

// InvalidationResult is what Invalidate answers.
type InvalidationResult struct {
	// ID names the invalidation's record.
	ID string `json:"id"`
	// Dropped counts the URIs the location of the replica that answered dropped.
	Dropped int `json:"dropped"`
	// Took is how long the invalidation took from the request to done, on that replica.
	Took string `json:"took"`
}

// Refusal is an invalidation refused for a reason the caller must fix.
type Refusal struct{ Msg string }

func (r *Refusal) Error() string { return r.Msg }

const (
	// maxPaths bounds the patterns of one invalidation.
	maxPaths = 100
	// keepInvalidations is how long an invalidation's record is kept: long enough for every
	// replica's watch to deliver it, short enough that they do not pile up.
	keepInvalidations = 10 * time.Minute
	// invalidateWait bounds the wait for this replica's location to have done it.
	invalidateWait = 5 * time.Second
)

// CheckPaths refuses patterns that cannot match a path.
func CheckPaths(paths []string) error {
	if len(paths) == 0 {
		return &Refusal{"give at least one path pattern, such as '/images/*' or '/*' for everything"}
	}
	if len(paths) > maxPaths {
		return &Refusal{fmt.Sprintf("%d path patterns: at most %d in one invalidation", len(paths), maxPaths)}
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "*") {
			return &Refusal{fmt.Sprintf("path %q: a pattern starts with '/' (or '*'), as '/images/*'", p)}
		}
		if len(p) > 1024 {
			return &Refusal{fmt.Sprintf("path %.40q...: longer than 1024 bytes", p)}
		}
	}
	return nil
}

// Invalidate drops the objects of Distribution name whose paths match paths, at every edge
// location that serves it: the invalidation is stored, every Set's watch delivers it, and
// Invalidate returns once this Set has done it.
func (s *Set) Invalidate(ctx context.Context, name string, paths []string) (InvalidationResult, error) {
	if err := CheckPaths(paths); err != nil {
		return InvalidationResult{}, err
	}
	if _, err := s.opts.Store.Get(ctx, Kind, name); err != nil {
		return InvalidationResult{}, err
	}
	start := time.Now()
	id := name + "." + strconv.FormatInt(start.UnixNano(), 36)
	data, err := json.Marshal(Invalidation{Distribution: name, Paths: paths, CreatedAt: start.UTC()})
	if err != nil {
		return InvalidationResult{}, err
	}
	rec, err := store.Create(ctx, s.opts.Store, InvalidationKind, id, data)
	if err != nil {
		return InvalidationResult{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, invalidateWait)
	defer cancel()
	if err := s.waitFor(wctx, rec.ResourceVersion); err != nil {
		return InvalidationResult{}, err
	}
	s.mu.Lock()
	dropped := s.dropped[id]
	delete(s.dropped, id)
	s.mu.Unlock()
	s.prune(ctx, start)
	return InvalidationResult{ID: id, Dropped: dropped, Took: time.Since(start).Round(time.Microsecond).String()}, nil
}

// prune deletes the invalidations older than keepInvalidations.
func (s *Set) prune(ctx context.Context, now time.Time) {
	recs, _, err := s.opts.Store.List(ctx, InvalidationKind)
	if err != nil {
		return
	}
	for _, r := range recs {
		var inv Invalidation
		if json.Unmarshal(r.Value, &inv) == nil && now.Sub(inv.CreatedAt) > keepInvalidations {
			if err := store.Delete(ctx, s.opts.Store, InvalidationKind, r.Name, r.ResourceVersion); err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
				s.log.Warn("pruning an old invalidation", "id", r.Name, "err", err)
			}
		}
	}
	// The counts of invalidations another replica answered are not wanted here.
	s.mu.Lock()
	for id := range s.dropped {
		i := strings.LastIndexByte(id, '.')
		if at, err := strconv.ParseInt(id[i+1:], 36, 64); err != nil || now.Sub(time.Unix(0, at)) > invalidateWait {
			delete(s.dropped, id)
		}
	}
	s.mu.Unlock()
}

// Distributions lists the stored Distributions, each with this Set's status of it.
func (s *Set) Distributions(ctx context.Context) ([]*v1alpha1.Distribution, error) {
	ds, _, err := store.ListObjects[v1alpha1.Distribution](ctx, s.opts.Store, Kind)
	for _, d := range ds {
		d.Status = s.Status(d.Metadata.Name)
	}
	return ds, err
}
