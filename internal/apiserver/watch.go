package apiserver

import (
	"encoding/json"
	"net/http"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Fleet watch event types, as Kubernetes names them.
const (
	WatchAdded    = "ADDED"
	WatchModified = "MODIFIED"
	WatchDeleted  = "DELETED"
)

// FleetEvent is one line of a fleet watch: the fleet as it is after a change.
type FleetEvent struct {
	Type  string          `json:"type"`
	Fleet *v1alpha1.Fleet `json:"fleet"`
}

// watchFleet streams f, then every change to it from the store's watch. The stream ends after the
// fleet's deletion, when the client goes, or when the store drops the watcher (it fell behind):
// the client then watches again.
func (s *Server) watchFleet(w http.ResponseWriter, r *http.Request, f *v1alpha1.Fleet) {
	ch, err := s.opts.Store.Watch(r.Context(), store.Fleets, f.Metadata.ResourceVersion)
	if err != nil {
		s.storeError(w, r, "watch of fleet "+f.Metadata.Name, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	if enc.Encode(FleetEvent{Type: WatchAdded, Fleet: f}) != nil {
		return
	}
	flush(w)
	types := map[store.EventType]string{store.Added: WatchAdded, store.Modified: WatchModified, store.Deleted: WatchDeleted}
	for ev := range ch {
		if ev.Record.Name != f.Metadata.Name {
			continue
		}
		cur, err := store.DecodeRecord[v1alpha1.Fleet](ev.Record)
		if err != nil {
			s.log.Error("fleet watch: undecodable record", "fleet", f.Metadata.Name, "err", err)
			return
		}
		if enc.Encode(FleetEvent{Type: types[ev.Type], Fleet: cur}) != nil {
			return
		}
		flush(w)
		if ev.Type == store.Deleted {
			return
		}
	}
}
