package apiserver

import (
	"errors"
	"net/http"
)

// getRoutes serves GET /v1/routes: what herd's DNS answers from (routes.Table), for `herd get
// routes` and for `herd dns` servers that follow this control plane.
func (s *Server) getRoutes(w http.ResponseWriter, r *http.Request) {
	if s.opts.Routes == nil {
		s.fail(w, r, http.StatusNotImplemented, errors.New("this control plane does not compute routes"))
		return
	}
	t, err := s.opts.Routes(r.Context())
	if err != nil {
		s.storeError(w, r, "routes", err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
