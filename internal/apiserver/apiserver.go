// Package apiserver is the control plane's HTTP/JSON API: the CLI is its client, and Prometheus
// scrapes its /metrics. Every request must carry the bearer token written
// by `herd up`; anything else gets a bare 401. Writes are validated with the same code the CLI uses and stored atomically, so a bad
// request changes nothing.
package apiserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/version"
)

// maxBodyBytes bounds a request body: one apply of specs is far below it.
const maxBodyBytes = 2 << 20

// Options configure the API.
type Options struct {
	Store store.Store
	// Token is the bearer token every request must present.
	Token  string
	Logger *slog.Logger
	// DefaultProvider fills regions that name none.
	DefaultProvider string
	// Providers are the providers this control plane runs; a region naming another is refused.
	Providers []string
	// OptionValidators check the region options of the providers that implement
	// provider.OptionsValidator, by provider name, on apply.
	OptionValidators map[string]provider.OptionsValidator
	// Images resolves spec.image to the bundle instances boot, on apply and rollout restart.
	// Default: no image store, and every image is pinned as written.
	Images imagepin.Resolver
	// ImageStore, if set, is listed, and pruned of bundles no fleet uses, by /v1/images.
	ImageStore ImageStore
	// Status, if set, reports components' health for GET /v1/status.
	Status func() map[string]string
	// LBHealth, if set, returns the load balancer's view of each instance by name.
	LBHealth func() map[string]string
	// Metrics, if set, serves GET /metrics (Prometheus), behind the same token as the API.
	Metrics http.Handler
	// KubeAccess gives herd's access to instances' Kubernetes APIs, by provider name, for logs
	// and debug access; instances of other providers have neither.
	KubeAccess map[string]provider.KubeAccessor
	// KubeProxy, if set, is where the kubeconfigs issued point: a TLS listener serving this API.
	KubeProxy *KubeProxy
	// KubeTokenTTL is how long an issued kubeconfig is valid. Default: DefaultKubeTokenTTL.
	KubeTokenTTL time.Duration
	// Events records what the API did to instances (kubeconfigs issued). Default: none.
	Events EventRecorder
	// Clock dates the kube tokens. Default: the real clock.
	Clock clock.PassiveClock
	// Usage, if set, reports the figures of the given instances and their fleets for GET /v1/usage.
	Usage func(instances []*v1alpha1.Instance) UsageReport
	// Chaos, if set, serves /v1/chaos and below (herd chaos), behind the same token.
	Chaos http.Handler
	// RegionLBs, if set, reports the regional load balancers for GET /v1/regions/loadbalancers.
	RegionLBs func() []RegionLB
	// Routes, if set, computes what herd's DNS answers from, for GET /v1/routes.
	Routes func(ctx context.Context) (routes.Table, error)
	// ClientRTTs, if set, reports the round trip from each client network to each region for
	// GET /v1/rtt.
	ClientRTTs func() []ClientRTT
	// Front, if set, reports the global front door for GET /v1/front.
	Front func() FrontDoor
	// DiscoveryZone is the zone fleets are published in to each other's instances, named in
	// apply's warnings. Default: v1alpha1.DefaultDiscoveryZone.
	DiscoveryZone string
	// Orphans, if set, reports the instances no fleet owns for GET /v1/orphans (orphans.go).
	Orphans func() ([]v1alpha1.Orphan, error)
	// Edges, if set, are the edge locations of the Distributions: /v1/distributions and below, and
	// distributions in /v1/apply (distributions.go).
	Edges Edges
	// Peers, if set, gives the API URLs of the other herd up replicas on the same store, whose
	// edge locations' figures a distribution's stats add up. They share this Token.
	Peers func(ctx context.Context) ([]string, error)
}

// RegionLB is a region's own load balancer, as the control plane last saw it.
type RegionLB struct {
	Region string `json:"region"`
	// Address is where the region's clients reach its listeners.
	Address string `json:"address"`
	Ports   []int  `json:"ports,omitempty"`
	// Synced is true when it runs the configuration the store gives it; Error says why not.
	Synced bool   `json:"synced"`
	Error  string `json:"error,omitempty"`
}

// EventRecorder records an event about an object ("Kind/name"), as events.Recorder does.
type EventRecorder interface {
	Eventf(object, typ, reason, format string, args ...any)
}

type noEvents struct{}

func (noEvents) Eventf(object, typ, reason, format string, args ...any) {}

// Server serves the API.
type Server struct {
	opts       Options
	log        *slog.Logger
	mux        *http.ServeMux
	kubeTokens *kubeTokens
}

// New returns the API handler.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.KubeTokenTTL <= 0 {
		opts.KubeTokenTTL = DefaultKubeTokenTTL
	}
	if opts.Events == nil {
		opts.Events = noEvents{}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "apiserver"), mux: http.NewServeMux(), kubeTokens: newKubeTokens(opts.Clock)}
	s.mux.HandleFunc("GET /v1/version", s.getVersion)
	s.mux.HandleFunc("GET /v1/status", s.getStatus)
	s.mux.HandleFunc("GET /v1/fleets", s.listFleets)
	s.mux.HandleFunc("GET /v1/fleets/{name}", s.getFleet)
	s.mux.HandleFunc("POST /v1/apply", s.apply)
	s.mux.HandleFunc("PUT /v1/fleets/{name}/scale", s.scaleFleet)
	s.mux.HandleFunc("POST /v1/fleets/{name}/rollout/undo", s.undoRollout)
	s.mux.HandleFunc("POST /v1/fleets/{name}/rollout/restart", s.restartRollout)
	s.mux.HandleFunc("POST /v1/fleets/{name}/rollout/promote", s.promoteRollout)
	s.mux.HandleFunc("POST /v1/fleets/{name}/rollout/abort", s.abortRollout)
	s.mux.HandleFunc("PUT /v1/fleets/{name}/tenants/{tenant}/pin", s.pinTenant)
	s.mux.HandleFunc("DELETE /v1/fleets/{name}/tenants/{tenant}/pin", s.unpinTenant)
	s.mux.HandleFunc("DELETE /v1/fleets/{name}", s.deleteFleet)
	s.mux.HandleFunc("GET /v1/instances", s.listInstances)
	s.mux.HandleFunc("GET /v1/events", s.listEvents)
	s.mux.HandleFunc("GET /v1/instances/{name}/logs", s.instanceLogs)
	s.mux.HandleFunc("GET /v1/instances/{name}/pods", s.instancePods)
	s.mux.HandleFunc("POST /v1/instances/{name}/kubeconfig", s.issueKubeconfig)
	s.mux.HandleFunc("GET /v1/usage", s.getUsage)
	s.mux.HandleFunc("GET /v1/regions/loadbalancers", func(w http.ResponseWriter, r *http.Request) {
		out := []RegionLB{}
		if s.opts.RegionLBs != nil {
			out = append(out, s.opts.RegionLBs()...)
		}
		writeJSON(w, http.StatusOK, out)
	})
	s.mux.HandleFunc("GET /v1/routes", s.getRoutes)
	s.mux.HandleFunc("GET /v1/orphans", s.listOrphans)
	s.routeGlobal()
	s.routeImages()
	s.routeDistributions()
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Chaos != nil {
		s.mux.Handle("/v1/chaos", opts.Chaos)
		s.mux.Handle("/v1/chaos/", opts.Chaos)
	}
	return s
}

// ServeHTTP authenticates, then routes. The Kubernetes proxy route takes kube tokens instead.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if name, path, ok := kubeRoute(r.URL.Path); ok {
		s.serveKube(w, r, name, path)
		return
	}
	if !s.authorized(r) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	s.mux.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || s.opts.Token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// ErrorBody is what every failed request returns.
type ErrorBody struct {
	Error string `json:"error"`
	// Fields lists each invalid field, when the request was refused by validation.
	Fields []FieldProblem `json:"fields,omitempty"`
}

// FieldProblem is one validation error, in the wire format.
type FieldProblem struct {
	Document int    `json:"document,omitempty"`
	Field    string `json:"field"`
	Message  string `json:"message"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // messages hold '<' and '>' and are read by people and curl
	_ = enc.Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		// etcd without quorum: nothing is wrong with the request, and a retry later will do.
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	if code >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, code, ErrorBody{Error: err.Error()})
}

func (s *Server) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("%s not found", what))
	case errors.Is(err, store.ErrConflict):
		s.fail(w, r, http.StatusConflict, fmt.Errorf("%s was changed by someone else meanwhile: try again", what))
	default:
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("%s: %w", what, err))
	}
}

func (s *Server) getVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": version.Version})
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	st := map[string]string{}
	if s.opts.Status != nil {
		st = s.opts.Status()
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) listFleets(w http.ResponseWriter, r *http.Request) {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](r.Context(), s.opts.Store, store.Fleets)
	if err != nil {
		s.storeError(w, r, "fleets", err)
		return
	}
	writeJSON(w, http.StatusOK, fleets)
}

// getFleet returns one fleet; with ?watch=true it streams FleetEvents as JSON lines: the fleet as
// it is, then each change to it, until it is deleted (the last event) or the client goes.
func (s *Server) getFleet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	f, err := store.GetObject[v1alpha1.Fleet](r.Context(), s.opts.Store, store.Fleets, name)
	if err != nil {
		s.storeError(w, r, "fleet "+strconv.Quote(name), err)
		return
	}
	if r.URL.Query().Get("watch") != "true" {
		writeJSON(w, http.StatusOK, f)
		return
	}
	s.watchFleet(w, r, f)
}

// ScaleRequest sets a fleet's desired instance count.
type ScaleRequest struct {
	Replicas int32 `json:"replicas"`
}

func (s *Server) scaleFleet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req ScaleRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("malformed scale request: %w", err))
		return
	}
	f, err := store.UpdateFleetSpec(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet) error {
		rp := f.Spec.Replicas
		switch {
		case req.Replicas < 0:
			return refuse(http.StatusUnprocessableEntity, "--replicas must be >= 0 (got %d)", req.Replicas)
		case req.Replicas < *rp.Min:
			return refuse(http.StatusUnprocessableEntity, "--replicas %d is below spec.replicas.min (%d): lower min in the fleet spec and apply it first", req.Replicas, *rp.Min)
		case req.Replicas > *rp.Max:
			return refuse(http.StatusUnprocessableEntity, "--replicas %d is above spec.replicas.max (%d): raise max in the fleet spec and apply it first", req.Replicas, *rp.Max)
		}
		d := req.Replicas
		f.Spec.Replicas.Desired = &d
		return nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("fleet scaled", "fleet", name, "replicas", req.Replicas)
	writeJSON(w, http.StatusOK, f)
}

// refusal is a request refused for a reason the client must fix; updateError answers with its code.
type refusal struct {
	code int
	err  error
}

func (e *refusal) Error() string { return e.err.Error() }

func refuse(code int, format string, args ...any) error {
	return &refusal{code: code, err: fmt.Errorf(format, args...)}
}

// updateError answers for a failed update of a fleet: a refusal with its code, a store error as such.
func (s *Server) updateError(w http.ResponseWriter, r *http.Request, name string, err error) {
	var rf *refusal
	if errors.As(err, &rf) {
		s.fail(w, r, rf.code, rf.err)
		return
	}
	s.storeError(w, r, "fleet "+strconv.Quote(name), err)
}

func (s *Server) deleteFleet(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.deleteFleetAndClaims(r.Context(), name); err != nil {
		s.storeError(w, r, "fleet "+strconv.Quote(name), err)
		return
	}
	s.log.Info("fleet deleted", "fleet", name)
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	insts, _, err := store.ListObjects[v1alpha1.Instance](r.Context(), s.opts.Store, store.Instances)
	if err != nil {
		s.storeError(w, r, "instances", err)
		return
	}
	fleet := r.URL.Query().Get("fleet")
	var health map[string]string
	if s.opts.LBHealth != nil {
		health = s.opts.LBHealth()
	}
	out := insts[:0]
	for _, in := range insts {
		if fleet != "" && in.Spec.Fleet != fleet {
			continue
		}
		if h, ok := health[in.Metadata.Name]; ok {
			in.Status.LBHealth = h
		}
		out = append(out, in)
	}
	writeJSON(w, http.StatusOK, out)
}

// listEvents returns events, oldest first; ?object=Kind/name filters, ?limit=N keeps the newest N,
// ?watch=true streams new events as JSON lines after the listed ones.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	evs, rev, err := store.ListObjects[v1alpha1.Event](r.Context(), s.opts.Store, store.Events)
	if err != nil {
		s.storeError(w, r, "events", err)
		return
	}
	match := func(e *v1alpha1.Event) bool {
		o := q.Get("object")
		return o == "" || e.Object == o || strings.HasPrefix(e.Object, "Instance/"+strings.TrimPrefix(o, "Fleet/")+"-")
	}
	var out []*v1alpha1.Event
	for _, e := range evs {
		if match(e) {
			out = append(out, e)
		}
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n >= 0 && n < len(out) {
		out = out[len(out)-n:]
	}
	if q.Get("watch") != "true" {
		writeJSON(w, http.StatusOK, out)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, e := range out {
		_ = enc.Encode(e)
	}
	flush(w)
	ch, err := s.opts.Store.Watch(r.Context(), store.Events, rev)
	if err != nil {
		return
	}
	for ev := range ch {
		if ev.Type != store.Added {
			continue
		}
		e, err := store.DecodeRecord[v1alpha1.Event](ev.Record)
		if err != nil || !match(e) {
			continue
		}
		if enc.Encode(e) != nil {
			return
		}
		flush(w)
	}
}

func flush(w io.Writer) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// undoRollout points the fleet's image back at the revision that served before the current one
// (from the status history). The controller then rolls back to it: by weights alone while that
// revision's instances still exist, otherwise as a new rollout.
func (s *Server) undoRollout(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var target v1alpha1.RevisionHistory
	f, err := store.UpdateFleetImage(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet) error {
		for _, h := range f.Status.History {
			if h.Revision != f.Status.CurrentRevision && h.Image != "" {
				target = h
				f.Spec.Image = h.Image
				f.Pinned = &v1alpha1.PinnedImage{Ref: h.Image, Digest: h.Image, By: v1alpha1.PinnedByUndo, At: s.opts.Clock.Now().UTC()}
				return nil
			}
		}
		return refuse(http.StatusConflict, "fleet %q has no earlier revision to go back to (see herd rollout history %s)", name, name)
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("rollout undone", "fleet", name, "revision", target.Revision, "image", target.Image)
	writeJSON(w, http.StatusOK, f)
}

// discoveryZone is the zone apply's warnings name.
func (s *Server) discoveryZone() string {
	if s.opts.DiscoveryZone != "" {
		return s.opts.DiscoveryZone
	}
	return v1alpha1.DefaultDiscoveryZone
}
