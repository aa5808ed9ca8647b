package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Bounds of what a stream sends and reads.
const (
	// snapshotEvents is how many of the latest events a snapshot holds.
	snapshotEvents = 100
	// groupWindow is the span the per-revision rates of a sample cover: long enough for a p95 of
	// a few requests a second, short enough that a rollout's shift shows within seconds.
	groupWindow = 5 * time.Second
	// maxNameLen bounds the names a stream takes (DNS labels are at most 63 characters).
	maxNameLen = 63
)

var watchTypes = map[store.EventType]string{store.Added: "ADDED", store.Modified: "MODIFIED", store.Deleted: "DELETED"}

// streamState is what one stream knows of its page's objects, to filter changes and to sample.
type streamState struct {
	scope scope
	// instanceFleet is the fleet of the instance an instance page shows.
	instanceFleet string
	fleets        map[string]*v1alpha1.Fleet
	instances     map[string]*v1alpha1.Instance
	health        map[string]string // as last sent
}

// stream serves GET /ui/api/stream[?fleet=NAME|?instance=NAME] as Server-Sent Events: a snapshot,
// then each change the store's watches report and, every SampleEvery, the load balancer's health
// changes and the page's figures. It ends when the browser goes, when herd up stops, or when a
// watch ends (the store dropped a watcher that fell behind); EventSource then reconnects and gets a
// fresh snapshot.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := &streamState{scope: scope{fleet: q.Get("fleet"), instance: q.Get("instance")},
		fleets: map[string]*v1alpha1.Fleet{}, instances: map[string]*v1alpha1.Instance{}, health: map[string]string{}}
	if len(st.scope.fleet) > maxNameLen || len(st.scope.instance) > maxNameLen {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("fleet and instance names are at most %d characters", maxNameLen)})
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "streaming unsupported by this connection"})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.closing, cancel)
	defer stop()

	snap, watches, err := h.snapshot(ctx, st)
	if err != nil {
		h.log.Error("dashboard stream", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) bool {
		data, err := json.Marshal(v)
		if err != nil {
			h.log.Error("dashboard stream: encode", "event", event, "err", err)
			return true
		}
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
		return err == nil
	}
	// retry: how long EventSource waits before reconnecting.
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || !send("snapshot", snap) {
		return
	}
	flusher.Flush()

	tick := time.NewTicker(h.opts.SampleEvery)
	defer tick.Stop()
	fleetCh, instCh, evCh := watches[0], watches[1], watches[2]
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case ev, open := <-fleetCh:
			if !open {
				return
			}
			ok = h.fleetChanged(st, ev, send)
		case ev, open := <-instCh:
			if !open {
				return
			}
			ok = h.instanceChanged(st, ev, send)
		case ev, open := <-evCh:
			if !open {
				return
			}
			ok = h.eventAdded(st, ev, send)
		case now := <-tick.C:
			ok = h.sampleTick(st, now, send)
		}
		if !ok {
			return
		}
		// Flush once a burst of changes has been written, not after each of them.
		if len(fleetCh)+len(instCh)+len(evCh) == 0 {
			flusher.Flush()
		}
	}
}

// snapshot lists what the page shows and starts one watch per kind from its list's revision, so
// that no change falls between the two.
func (h *Handler) snapshot(ctx context.Context, st *streamState) (*snapshot, [3]<-chan store.Event, error) {
	var watches [3]<-chan store.Event
	fleets, fleetRev, err := store.ListObjects[v1alpha1.Fleet](ctx, h.opts.Store, store.Fleets)
	if err != nil {
		return nil, watches, fmt.Errorf("list fleets: %w", err)
	}
	insts, instRev, err := store.ListObjects[v1alpha1.Instance](ctx, h.opts.Store, store.Instances)
	if err != nil {
		return nil, watches, fmt.Errorf("list instances: %w", err)
	}
	evs, evRev, err := store.ListObjects[v1alpha1.Event](ctx, h.opts.Store, store.Events)
	if err != nil {
		return nil, watches, fmt.Errorf("list events: %w", err)
	}
	for i, kw := range []struct {
		kind string
		rev  int64
	}{{store.Fleets, fleetRev}, {store.Instances, instRev}, {store.Events, evRev}} {
		if watches[i], err = h.opts.Store.Watch(ctx, kw.kind, kw.rev); err != nil {
			return nil, watches, fmt.Errorf("watch %s: %w", kw.kind, err)
		}
	}

	health := h.lbHealth()
	snap := &snapshot{Fleets: []fleetView{}, Instances: []instanceView{}, Events: []eventView{}, SampleEvery: h.opts.SampleEvery.Seconds()}
	for _, in := range insts {
		if st.scope.wantsInstance(in) {
			st.instances[in.Metadata.Name] = in
			st.instanceFleet = in.Spec.Fleet
			v := viewInstance(in, health)
			st.health[v.Name] = v.LBHealth
			snap.Instances = append(snap.Instances, v)
		}
	}
	if st.scope.instance == "" {
		st.instanceFleet = ""
	}
	for _, f := range fleets {
		if st.scope.wantsFleet(f.Metadata.Name, st.instanceFleet) {
			st.fleets[f.Metadata.Name] = f
			snap.Fleets = append(snap.Fleets, viewFleet(f))
		}
	}
	for _, e := range evs {
		if st.scope.wantsEvent(e) {
			snap.Events = append(snap.Events, viewEvent(e))
		}
	}
	if n := len(snap.Events); n > snapshotEvents {
		snap.Events = snap.Events[n-snapshotEvents:]
	}
	return snap, watches, nil
}

func (h *Handler) lbHealth() map[string]string {
	if h.opts.LBHealth == nil {
		return map[string]string{}
	}
	return h.opts.LBHealth()
}

type sendFunc func(event string, v any) bool

func (h *Handler) fleetChanged(st *streamState, ev store.Event, send sendFunc) bool {
	if !st.scope.wantsFleet(ev.Record.Name, st.instanceFleet) {
		return true
	}
	f, err := store.DecodeRecord[v1alpha1.Fleet](ev.Record)
	if err != nil {
		h.log.Error("dashboard stream: undecodable fleet", "fleet", ev.Record.Name, "err", err)
		return true
	}
	if ev.Type == store.Deleted {
		delete(st.fleets, f.Metadata.Name)
	} else {
		st.fleets[f.Metadata.Name] = f
	}
	v := viewFleet(f)
	return send("fleet", change{Type: watchTypes[ev.Type], Fleet: &v})
}

func (h *Handler) instanceChanged(st *streamState, ev store.Event, send sendFunc) bool {
	in, err := store.DecodeRecord[v1alpha1.Instance](ev.Record)
	if err != nil {
		h.log.Error("dashboard stream: undecodable instance", "instance", ev.Record.Name, "err", err)
		return true
	}
	if !st.scope.wantsInstance(in) {
		return true
	}
	if ev.Type == store.Deleted {
		delete(st.instances, in.Metadata.Name)
		delete(st.health, in.Metadata.Name)
	} else {
		st.instances[in.Metadata.Name] = in
	}
	v := viewInstance(in, st.health)
	return send("instance", change{Type: watchTypes[ev.Type], Instance: &v})
}

func (h *Handler) eventAdded(st *streamState, ev store.Event, send sendFunc) bool {
	if ev.Type != store.Added {
		return true
	}
	e, err := store.DecodeRecord[v1alpha1.Event](ev.Record)
	if err != nil || !st.scope.wantsEvent(e) {
		return true
	}
	return send("event", viewEvent(e))
}

// sampleTick sends the load balancer's health of the instances whose state changed, and the
// page's figures.
func (h *Handler) sampleTick(st *streamState, now time.Time, send sendFunc) bool {
	if h.opts.LBHealth != nil {
		all := h.opts.LBHealth()
		changed := map[string]string{}
		for name := range st.instances {
			if cur := all[name]; cur != st.health[name] {
				changed[name] = cur
				st.health[name] = cur
			}
		}
		if len(changed) > 0 && !send("health", changed) {
			return false
		}
	}
	if h.opts.Usage == nil || (st.scope.fleet == "" && st.scope.instance == "") {
		return true
	}
	insts := make([]*v1alpha1.Instance, 0, len(st.instances))
	for _, in := range st.instances {
		insts = append(insts, in)
	}
	smp := sample{Time: now}
	if st.scope.fleet != "" {
		smp.Groups = h.opts.Usage.Groups(insts, groupWindow)
		if f := st.fleets[st.scope.fleet]; f != nil {
			smp.Weights = map[string]int32{}
			for _, rv := range f.Status.Revisions {
				smp.Weights[rv.Name] = rv.Weight
			}
		}
	} else if len(insts) == 1 {
		if rep := h.opts.Usage.Report(insts); len(rep.Instances) == 1 {
			smp.Instance = &rep.Instances[0].Usage
		}
	}
	return send("sample", smp)
}
