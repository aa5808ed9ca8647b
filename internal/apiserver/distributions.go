package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/edge"
	"herd.dev/herd/internal/edgeplane"
	"herd.dev/herd/internal/store"
)

// Edges are the edge locations herd up runs, one per Distribution (edgeplane.Set).
type Edges interface {
	Distributions(ctx context.Context) ([]*v1alpha1.Distribution, error)
	Status(name string) v1alpha1.DistributionStatus
	Stats(name string) (edge.Stats, bool)
	Invalidate(ctx context.Context, name string, paths []string) (edgeplane.InvalidationResult, error)
}

// InvalidationRequest names the path patterns to invalidate.
type InvalidationRequest struct {
	Paths []string `json:"paths"`
}

// EdgeStats are a distribution's figures, summed over the edge locations of every herd up replica
// that answered.
type EdgeStats struct {
	Distribution  string     `json:"distribution"`
	Stats         edge.Stats `json:"stats"`
	HitRatio      float64    `json:"hitRatio"`
	OriginOffload float64    `json:"originOffload"`
	// Locations is how many edge locations the figures add up: one per replica that runs one.
	Locations int `json:"locations"`
	// Unreached says which replicas' figures could not be read, and why.
	Unreached []string `json:"unreached,omitempty"`
}

// peerTimeout bounds the reading of the other replicas' figures.
const peerTimeout = 3 * time.Second

func (s *Server) routeDistributions() {
	if s.opts.Edges == nil {
		return
	}
	s.mux.HandleFunc("GET /v1/distributions", func(w http.ResponseWriter, r *http.Request) {
		ds, err := s.opts.Edges.Distributions(r.Context())
		if err != nil {
			s.storeError(w, r, "distributions", err)
			return
		}
		writeJSON(w, http.StatusOK, ds)
	})
	s.mux.HandleFunc("GET /v1/distributions/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		d, err := store.GetObject[v1alpha1.Distribution](r.Context(), s.opts.Store, edgeplane.Kind, name)
		if err != nil {
			s.storeError(w, r, "distribution "+strconv.Quote(name), err)
			return
		}
		d.Status = s.opts.Edges.Status(name)
		writeJSON(w, http.StatusOK, d)
	})
	s.mux.HandleFunc("DELETE /v1/distributions/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := store.Delete(r.Context(), s.opts.Store, edgeplane.Kind, name, 0); err != nil {
			s.storeError(w, r, "distribution "+strconv.Quote(name), err)
			return
		}
		s.log.Info("distribution deleted", "distribution", name)
		writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
	})
	s.mux.HandleFunc("POST /v1/distributions/{name}/invalidations", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		var req InvalidationRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			s.fail(w, r, http.StatusBadRequest, fmt.Errorf("malformed invalidation request: %w", err))
			return
		}
		res, err := s.opts.Edges.Invalidate(r.Context(), name, req.Paths)
		var rf *edgeplane.Refusal
		switch {
		case errors.As(err, &rf):
			s.fail(w, r, http.StatusUnprocessableEntity, err)
		case errors.Is(err, context.DeadlineExceeded):
			s.fail(w, r, http.StatusGatewayTimeout, err)
		case err != nil:
			s.storeError(w, r, "distribution "+strconv.Quote(name), err)
		default:
			s.log.Info("invalidation done", "distribution", name, "paths", req.Paths, "dropped", res.Dropped, "took", res.Took)
			writeJSON(w, http.StatusOK, res)
		}
	})
	// With ?scope=local the replica's own location only: what the others ask of each other.
	s.mux.HandleFunc("GET /v1/distributions/{name}/stats", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		res := EdgeStats{Distribution: name}
		if st, ok := s.opts.Edges.Stats(name); ok {
			res.Stats, res.Locations = st, 1
		}
		if r.URL.Query().Get("scope") != "local" && s.opts.Peers != nil {
			s.addPeerStats(r.Context(), &res)
		}
		if res.Locations == 0 {
			s.fail(w, r, http.StatusNotFound, fmt.Errorf("distribution %q runs no edge location (herd get distributions says why)%s", name, unreached(res.Unreached)))
			return
		}
		res.HitRatio, res.OriginOffload = res.Stats.HitRatio(), res.Stats.OriginOffload()
		writeJSON(w, http.StatusOK, res)
	})
}

func unreached(u []string) string {
	if len(u) == 0 {
		return ""
	}
	return "; not reached: " + strings.Join(u, "; ")
}

// addPeerStats adds the figures of the other replicas' locations of res's distribution, asked of
// them all at once.
func (s *Server) addPeerStats(ctx context.Context, res *EdgeStats) {
	peers, err := s.opts.Peers(ctx)
	if err != nil {
		res.Unreached = append(res.Unreached, "the list of replicas: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, api := range peers {
		wg.Go(func() {
			st, found, err := s.peerStats(ctx, api, res.Distribution)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				res.Unreached = append(res.Unreached, api+": "+err.Error())
			case found:
				res.Stats = res.Stats.Add(st)
				res.Locations++
			}
		})
	}
	wg.Wait()
	slices.Sort(res.Unreached)
}

// peerStats reads one replica's own figures of a distribution, and whether it runs a location of it.
func (s *Server) peerStats(ctx context.Context, api, name string) (edge.Stats, bool, error) {
	u := strings.TrimSuffix(api, "/") + "/v1/distributions/" + url.PathEscape(name) + "/stats?scope=local"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return edge.Stats{}, false, err
	}
	req.Header.Set("Authorization", "Bearer "+s.opts.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return edge.Stats{}, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var es EdgeStats
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&es); err != nil {
			return edge.Stats{}, false, fmt.Errorf("reading its figures: %w", err)
		}
		return es.Stats, true, nil
	case http.StatusNotFound:
		return edge.Stats{}, false, nil // it runs no location of the distribution
	}
	return edge.Stats{}, false, fmt.Errorf("answered %s", resp.Status)
}

// planDistributions works out what an apply writes of its distributions: each validated with its
// defaults, its listeners' ports not held by a fleet or another distribution on the same address,
// and written only when its spec or labels changed.
func (s *Server) planDistributions(ctx context.Context, dists []v1alpha1.Distribution, fleets []v1alpha1.Fleet) (applyPlan, error) {
	var plan applyPlan
	stored, _, err := store.ListObjects[v1alpha1.Distribution](ctx, s.opts.Store, edgeplane.Kind)
	if err != nil {
		return plan, err
	}
	storedFleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, s.opts.Store, store.Fleets)
	if err != nil {
		return plan, err
	}
	// Ports in use: every fleet's (the one applied now, or as stored), and every distribution's.
	fleetPorts := map[int32]string{}
	for _, f := range storedFleets {
		for _, l := range f.Spec.Listeners {
			fleetPorts[l.Port] = f.Metadata.Name
		}
	}
	for _, f := range fleets {
		for _, l := range f.Spec.Listeners {
			fleetPorts[l.Port] = f.Metadata.Name
		}
	}
	type addr struct {
		host string
		port int32
	}
	held := map[addr]string{}
	byName := map[string]*v1alpha1.Distribution{}
	for _, d := range stored {
		byName[d.Metadata.Name] = d
	}
	applied := map[string]bool{}
	for i := range dists {
		applied[dists[i].Metadata.Name] = true
	}
	for _, d := range stored {
		if !applied[d.Metadata.Name] {
			for _, l := range d.Spec.Listeners {
				held[addr{l.Address, l.Port}] = d.Metadata.Name
			}
		}
	}
	now := time.Now().UTC()
	for i := range dists {
		d := &dists[i]
		d.Status = v1alpha1.DistributionStatus{}
		v1alpha1.SetDistributionDefaults(d)
		name := d.Metadata.Name
		problem := func(field, format string, args ...any) {
			plan.problems = append(plan.problems, FieldProblem{Field: "distribution " + name + ": " + field, Message: fmt.Sprintf(format, args...)})
		}
		for _, e := range v1alpha1.ValidateDistribution(d) {
			problem(e.Field, "%s", e.Message)
		}
		for j, l := range d.Spec.Listeners {
			field := fmt.Sprintf("spec.listeners[%d].port", j)
			if f, ok := fleetPorts[l.Port]; ok {
				problem(field, "port %d is fleet %q's load-balancer port: give the distribution another port", l.Port, f)
			} else if o, ok := held[addr{l.Address, l.Port}]; ok && o != name {
				problem(field, "%s:%d is also distribution %q's listener: give each its own port", l.Address, l.Port, o)
			}
			held[addr{l.Address, l.Port}] = name
		}
		res := ApplyResult{Kind: "distribution", Name: name}
		cur := byName[name]
		switch {
		case cur == nil:
			d.Metadata.CreationTimestamp = &now
			d.Metadata.ResourceVersion = 0
			d.Metadata.Generation = 1
			res.Result = "created"
		case sameJSON(cur.Spec, d.Spec) && reflect.DeepEqual(cur.Metadata.Labels, d.Metadata.Labels):
			res.Result = "unchanged"
		default:
			d.Metadata.CreationTimestamp = cur.Metadata.CreationTimestamp
			d.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
			d.Metadata.Generation = cur.Metadata.Generation + 1
			res.Result = "configured"
		}
		plan.results = append(plan.results, res)
		if res.Result == "unchanged" {
			continue
		}
		op, err := store.PutOp(edgeplane.Kind, d)
		if err != nil {
			return plan, err
		}
		plan.ops = append(plan.ops, op)
	}
	return plan, nil
}

// sameJSON reports whether a and b store alike, so that nil and empty lists are no change.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
