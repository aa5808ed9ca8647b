package apiserver

import (
	"errors"
	"net/http"

	"herd.dev/herd/api/v1alpha1"
)

// ErrNotLeading is what Options.Orphans returns on a replica that does not run the controller,
// which alone knows the orphans.
var ErrNotLeading = errors.New("this replica does not run the controller, which finds the orphans: ask the replica that leads (herd version names it)")

// listOrphans returns the instances the providers run that no fleet owns, as the controller's
// orphan collector last found them, each with when it goes.
func (s *Server) listOrphans(w http.ResponseWriter, r *http.Request) {
	out := []v1alpha1.Orphan{}
	if s.opts.Orphans != nil {
		found, err := s.opts.Orphans()
		if errors.Is(err, ErrNotLeading) {
			s.fail(w, r, http.StatusServiceUnavailable, err)
			return
		}
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		out = append(out, found...)
	}
	writeJSON(w, http.StatusOK, out)
}
