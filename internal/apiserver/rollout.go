package apiserver

import (
	"net/http"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// promoteRollout asks the controller to skip the rest of the fleet's rollout and move all traffic
// to the new revision.
func (s *Server) promoteRollout(w http.ResponseWriter, r *http.Request) {
	s.commandRollout(w, r, v1alpha1.RolloutPromote)
}

// abortRollout asks the controller to roll the fleet's rollout back at once.
func (s *Server) abortRollout(w http.ResponseWriter, r *http.Request) {
	s.commandRollout(w, r, v1alpha1.RolloutAbort)
}

// commandRollout records cmd as the fleet's rollout request (Fleet.Requests, of which the API is
// the only writer), with the revision whose rollout it is for and when, conditional on the version
// read. The controller stays the one that decides and acts: it carries out a request it has not
// handled yet and records in the rollout's status that it did, so a restarted controller acts on
// it once. A rollout that is not in progress is refused.
func (s *Server) commandRollout(w http.ResponseWriter, r *http.Request, cmd string) {
	name := r.PathValue("name")
	f, err := store.UpdateFleetRequests(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet, reqs *v1alpha1.FleetRequests) (bool, error) {
		ro := f.Status.Rollout
		if ro == nil || ro.Revision != f.Status.CurrentRevision || !ro.InProgress() {
			state := "no BlueGreen or Canary rollout"
			if ro != nil && ro.Revision == f.Status.CurrentRevision {
				state = "its rollout of " + ro.Revision + " is " + ro.Phase
			}
			return false, refuse(http.StatusConflict, "fleet %q has no rollout in progress (%s): see herd rollout status %s", name, state, name)
		}
		if p := reqs.Rollout; p != nil && p.Command == cmd && p.Revision == ro.Revision && !p.Equal(ro.HandledRequest) {
			return false, nil // the same command waits to be carried out
		}
		reqs.Rollout = &v1alpha1.RolloutRequest{Command: cmd, Revision: ro.Revision, RequestedAt: time.Now().UTC()}
		return true, nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("rollout command recorded", "fleet", name, "revision", f.Requests.Rollout.Revision, "command", cmd)
	writeJSON(w, http.StatusOK, f)
}

// RestartResult is the answer to a rollout restart: the fleet as the API left it, and the image
// it booted before. The fleet rolls when they differ.
type RestartResult struct {
	Fleet    *v1alpha1.Fleet `json:"fleet"`
	Previous string          `json:"previous"`
}

// restartRollout resolves the fleet's spec.image again, as an apply of the same spec would, and
// pins what it names now: a rebuilt image rolls out (with the fleet's strategy); an image that
// still names the pinned bundle changes nothing.
func (s *Server) restartRollout(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var previous string
	f, err := store.UpdateFleetImage(r.Context(), s.opts.Store, name, func(f *v1alpha1.Fleet) error {
		previous = f.BootImage()
		defaulted := *f
		v1alpha1.SetFleetDefaults(&defaulted, s.opts.DefaultProvider)
		pin, err := s.opts.Images.Pin(&defaulted, v1alpha1.PinnedByRestart, s.opts.Clock.Now())
		if err != nil {
			return refuse(http.StatusUnprocessableEntity, "fleet %q: spec.image: %w", name, err)
		}
		if pin.Digest != previous {
			f.Pinned = pin
		}
		return nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("rollout restart", "fleet", name, "image", f.Spec.Image, "previous", previous, "pinned", f.BootImage())
	writeJSON(w, http.StatusOK, RestartResult{Fleet: f, Previous: previous})
}
