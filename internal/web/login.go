package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// cookieName holds a session's id. The cookie is HttpOnly (no script reads it), SameSite=Strict
// (no other site's page sends it) and scoped to /ui. It cannot be Secure: herd up serves plain
// HTTP on loopback, and a Secure cookie would never be sent back.
const cookieName = "herd_session"

// maxSessions bounds the logins kept; past it the oldest is dropped (its browser logs in again).
const maxSessions = 1000

// sessions are the logins of browsers, in memory: a restart of herd up logs everyone out, and a
// logout ends the session on the server, not only in the browser.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	expires map[string]time.Time // session id -> end
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, expires: map[string]time.Time{}}
}

// start returns a new session's id: 32 random bytes, hex.
func (s *sessions) start() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics rather than return an error)
	id := hex.EncodeToString(b)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, end := range s.expires {
		if !now.Before(end) {
			delete(s.expires, k)
		}
	}
	if len(s.expires) >= maxSessions {
		oldest := ""
		for k, end := range s.expires {
			if oldest == "" || end.Before(s.expires[oldest]) {
				oldest = k
			}
		}
		delete(s.expires, oldest)
	}
	s.expires[id] = now.Add(s.ttl)
	return id
}

func (s *sessions) valid(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	end, ok := s.expires[id]
	return ok && s.now().Before(end)
}

func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expires, id)
}

// authenticated reports whether r comes from a logged-in browser or carries the API's bearer
// token (scripts and tests read the dashboard's data the way the CLI reads the API).
func (h *Handler) authenticated(r *http.Request) bool {
	if c, err := r.Cookie(cookieName); err == nil && h.sessions.valid(c.Value) {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && h.tokenMatches(got)
}

func (h *Handler) tokenMatches(got string) bool {
	return h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) == 1
}

// login takes the token from the form's body (a query string would land in logs and history):
// the right one starts a session and goes to the dashboard, a wrong one back to the form.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site login refused: open the dashboard at this server's own address", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if r.URL.RawQuery != "" || r.ParseForm() != nil || !h.tokenMatches(strings.TrimSpace(r.PostForm.Get("token"))) {
		http.Redirect(w, r, "/ui/login?failed=1", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: h.sessions.start(), Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(h.opts.SessionTTL.Seconds())})
	h.log.Info("dashboard login", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// logout ends the session and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site logout refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		h.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// sameOrigin checks a form post comes from a page of this server: browsers send Origin on every
// POST. With the SameSite=Strict cookie, that is the dashboard's defence against cross-site
// requests (it changes nothing but its own session anyway). A request without Origin is not a
// browser's and carries no cookie of ours worth forging.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
}
