package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Handler serves the chaos API, mounted by the API server behind its token:
//
//	GET  /v1/chaos              every action kept, newest first
//	POST /v1/chaos              start an action (a ChaosActionSpec); 201 with the action
//	GET  /v1/chaos/{name}       one action
//	POST /v1/chaos/{name}/stop  undo an active action now
//
// A refused request answers 422 with {"error": "..."} naming the field and the fix.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/chaos", func(w http.ResponseWriter, r *http.Request) {
		list, err := e.List(r.Context())
		if err != nil {
			fail(w, err)
			return
		}
		out := make([]v1alpha1.ChaosAction, 0, len(list))
		for _, a := range list {
			out = append(out, *a)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /v1/chaos", func(w http.ResponseWriter, r *http.Request) {
		var spec v1alpha1.ChaosActionSpec
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			fail(w, refuse("malformed chaos action: %v", err))
			return
		}
		a, err := e.Start(r.Context(), spec)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, a)
	})
	mux.HandleFunc("GET /v1/chaos/{name}", func(w http.ResponseWriter, r *http.Request) {
		a, err := e.Get(r.Context(), r.PathValue("name"))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("POST /v1/chaos/{name}/stop", func(w http.ResponseWriter, r *http.Request) {
		a, err := e.Stop(r.Context(), r.PathValue("name"))
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	return mux
}

func fail(w http.ResponseWriter, err error) {
	var re *RequestError
	code := http.StatusInternalServerError
	switch {
	case errors.As(err, &re):
		code = http.StatusUnprocessableEntity
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, store.ErrUnavailable):
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{fmt.Sprint(err)})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
