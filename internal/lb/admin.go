package lb

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// maxAdminBody bounds a config PUT to the admin API.
const maxAdminBody = 8 << 20

// NewAdminHandler returns the admin API of a standalone load balancer, for a controller that runs
// elsewhere. Every request must carry "Authorization: Bearer <token>"; anything else gets a bare 401.
//
//	GET  /config   the applied config (JSON, defaults filled in)
//	PUT  /config   apply a whole new config (JSON or YAML, unknown fields rejected); 400 names the bad field
//	GET  /health   the health of every target (JSON)
//	GET  /stats    a Metrics snapshot (JSON)
//	GET  /rtt      the round-trip time to each client network (JSON list of NetworkRTT:
//	               {"network": "10.1.2.0/24", "srtt_ms": 10.4, "samples": 12, "last_seen": "<RFC 3339>"})
//	GET  /metrics  Prometheus metrics
func NewAdminHandler(lb *LB, token string, logger *slog.Logger) (http.Handler, error) {
	if strings.TrimSpace(token) == "" {
		return nil, errors.New("admin token must not be empty")
	}
	if logger == nil {
		logger = lb.log
	}
	a := &admin{lb: lb, log: logger.With("component", "lb-admin"), want: sha256.Sum256([]byte(token))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config", a.getConfig)
	mux.HandleFunc("PUT /config", a.putConfig)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, lb.Health()) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, lb.Metrics()) })
	mux.HandleFunc("GET /rtt", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, lb.ClientRTTs()) })
	mux.Handle("GET /metrics", lb.MetricsHandler())
	a.next = mux
	return a, nil
}

type admin struct {
	lb   *LB
	log  *slog.Logger
	want [sha256.Size]byte
	next http.Handler
}

func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(r) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	a.next.ServeHTTP(w, r)
}

// authorized compares digests in constant time, so neither the token nor its length leaks through timing.
func (a *admin) authorized(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(auth) < len(prefix) || !strings.EqualFold(auth[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(auth[len(prefix):]))
	return subtle.ConstantTimeCompare(got[:], a.want[:]) == 1
}

func (a *admin) getConfig(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.lb.Config())
}

func (a *admin) putConfig(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{fmt.Sprintf("reading config: %v", err)})
		return
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	if err := a.lb.Apply(cfg); err != nil {
		a.log.Warn("config rejected", "error", err)
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, a.lb.Config())
}

type errorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
