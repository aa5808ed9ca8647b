package apiserver

import (
	"net/http"

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

// commandRollout records cmd in the status of the fleet's rollout in progress, conditional on the
// version read, so that the controller stays the one that decides and acts: it reads the command
// with the rest of the rollout's stored state (a restarted controller too), carries it out and
// clears it. A rollout that is not in progress is refused.
func (s *Server) commandRollout(w http.ResponseWriter, r *http.Request, cmd string) {
	name := r.PathValue("name")
	f, err := store.UpdateObject(r.Context(), s.opts.Store, store.Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		ro := f.Status.Rollout
		if ro == nil || ro.Revision != f.Status.CurrentRevision || !ro.InProgress() {
			state := "no BlueGreen or Canary rollout"
			if ro != nil && ro.Revision == f.Status.CurrentRevision {
				state = "its rollout of " + ro.Revision + " is " + ro.Phase
			}
			return false, refuse(http.StatusConflict, "fleet %q has no rollout in progress (%s): see herd rollout status %s", name, state, name)
		}
		if ro.Requested == cmd {
			return false, nil
		}
		ro.Requested = cmd
		return true, nil
	})
	if err != nil {
		s.updateError(w, r, name, err)
		return
	}
	s.log.Info("rollout command recorded", "fleet", name, "revision", f.Status.Rollout.Revision, "command", cmd)
	writeJSON(w, http.StatusOK, f)
}
