// Package web is the dashboard `herd up` serves under /ui: the fleets and their instances as a live
// grid coloured by health, each fleet's traffic per revision and region, its rollouts and events,
// and each instance's pods, logs and node figures.
//
// The dashboard is read-only and a client of the API like the CLI: a person logs in once with
// herd up's API token (a form, never a URL, so that it lands in no log), and gets an HttpOnly,
// SameSite=Strict session cookie. Each page opens one Server-Sent Events stream that sends a
// snapshot of what the page shows and then every change from the store's watches, with the load
// balancer's and agents' figures sampled server-side at most once a second; the browser never
// polls. The front end is plain HTML, CSS and small JavaScript modules embedded in the binary, with
// uPlot (vendored by hack/web/vendor.sh) for the charts: no build step, no CDN.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/usage"
)

//go:embed assets
var assets embed.FS

// Usage gives the figures the dashboard charts; *usage.Sampler has them.
type Usage interface {
	Report(instances []*v1alpha1.Instance) apiserver.UsageReport
	Groups(instances []*v1alpha1.Instance, window time.Duration) []usage.GroupUsage
}

// Options configure the dashboard.
type Options struct {
	// Store is read for the snapshots and watched for the changes. Required.
	Store store.Store
	// Token is herd up's API token, the one credential the login form takes. Required.
	Token string
	// API serves every request outside /ui; the dashboard's reads of it (pods, logs) go through
	// /ui/api/ with the session's cookie. Required.
	API http.Handler
	// TokenFile and ConfigFile are where herd up wrote the token and the client config, for the
	// login form's hint. Default: not named.
	TokenFile, ConfigFile string
	// LBHealth returns the load balancer's view of each instance by name. Default: none known.
	LBHealth func() map[string]string
	// Usage gives the traffic and node figures. Default: no charts.
	Usage Usage
	// SampleEvery is how often a stream sends the figures and health it samples. Default: 1s.
	SampleEvery time.Duration
	// SessionTTL is how long a login lasts. Default: 12h.
	SessionTTL time.Duration
	Logger     *slog.Logger
}

// Handler serves the dashboard under /ui and hands every other request to the API.
type Handler struct {
	opts     Options
	log      *slog.Logger
	mux      *http.ServeMux
	sessions *sessions
	static   http.Handler

	// closing ends every open stream when herd up shuts down (Close).
	closing   context.Context
	closeOnce sync.Once
	close     context.CancelFunc
}

// New returns the dashboard in front of opts.API.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = time.Second
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{opts: opts, log: opts.Logger.With("component", "web"), mux: http.NewServeMux(),
		sessions: newSessions(opts.SessionTTL, time.Now), static: http.StripPrefix("/ui/assets/", http.FileServerFS(sub)),
		closing: ctx, close: cancel}
	h.mux.Handle("GET /ui/assets/", h.static)
	h.mux.HandleFunc("GET /ui/login", h.loginPage)
	h.mux.HandleFunc("POST /ui/login", h.login)
	h.mux.HandleFunc("POST /ui/logout", h.logout)
	// The pages: one shell, whose script reads the path.
	h.mux.HandleFunc("GET /ui/{$}", h.page(""))
	h.mux.HandleFunc("GET /ui/fleets/{name}", h.page(store.Fleets))
	h.mux.HandleFunc("GET /ui/instances/{name}", h.page(store.Instances))
	// The data: the page's stream, and read-only passage to the API.
	h.mux.HandleFunc("GET /ui/api/stream", h.data(h.stream))
	h.mux.HandleFunc("GET /ui/api/v1/", h.data(h.passAPI))
	h.mux.HandleFunc("/ui/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET")
		writeJSON(w, http.StatusMethodNotAllowed, apiserver.ErrorBody{Error: "the dashboard only reads: use the herd command to change anything"})
	})
	h.mux.HandleFunc("/ui/", h.unknownPage)
	return h
}

// Close ends the open streams, so that shutting down does not wait for browsers to leave; herd up
// registers it with http.Server.RegisterOnShutdown.
func (h *Handler) Close() { h.closeOnce.Do(h.close) }

// ServeHTTP routes /ui to the dashboard, / to it too (a browser pointed at herd up's address), and
// everything else to the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/" && r.Method == http.MethodGet && r.Header.Get("Authorization") == "":
		http.Redirect(w, r, "/ui/", http.StatusFound)
	case r.URL.Path == "/favicon.ico" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		// Browsers ask for it on their own, without the session: it is no secret.
		serveFavicon(w, r)
	case r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/"):
		securityHeaders(w.Header())
		h.mux.ServeHTTP(w, r)
	default:
		h.opts.API.ServeHTTP(w, r)
	}
}

// securityHeaders keep the dashboard's pages from running anything but its own scripts (so that
// text slipping into markup still cannot run), from being framed, and from leaking its addresses.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer browsers send "Origin: null" with the forms'
	// posts, which sameOrigin would refuse.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
}

// data wraps a data endpoint: without a session (or the API's bearer token) it answers 401 and
// nothing else.
func (h *Handler) data(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.authenticated(r) {
			writeJSON(w, http.StatusUnauthorized, apiserver.ErrorBody{Error: "not logged in: log in at /ui/login with herd up's API token"})
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		next(w, r)
	}
}

// passAPI hands a logged-in browser's read of /ui/api/v1/... to the API as /v1/..., with the
// token the session stands for. Only GET reaches here, so the dashboard can read what the CLI
// reads (logs, pods) and change nothing.
func (h *Handler) passAPI(w http.ResponseWriter, r *http.Request) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/ui/api")
	r2.URL.RawPath = ""
	r2.RequestURI = ""
	r2.Header = r.Header.Clone()
	r2.Header.Del("Cookie") // the API needs only the token; keep the session's id out of it
	r2.Header.Set("Authorization", "Bearer "+h.opts.Token)
	h.opts.API.ServeHTTP(w, r2)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
