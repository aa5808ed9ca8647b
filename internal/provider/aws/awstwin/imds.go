package awstwin

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The twin serves each instance's metadata service (IMDS) on a server of its own, as each EC2
// instance reaches its own at 169.254.169.254: IMDSv2 only, as an instance launched with
// HttpTokens=required, so that a GET without a session token is refused with 401. It serves what
// herd's agent reads: instance-id, local-ipv4, placement, spot/instance-action and the user data
// given at RunInstances.

// IMDS headers.
const (
	imdsTokenHeader    = "X-aws-ec2-metadata-token"
	imdsTokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
)

// metadata is the twin's metadata servers, by instance ID.
type metadata struct {
	mu      sync.Mutex
	servers map[string]*httptest.Server
	tokens  map[string]time.Time // session token -> expiry
	notices map[string]string    // instance ID -> spot/instance-action document
}

// MetadataURL is the endpoint of instance id's metadata service (what 169.254.169.254 is on
// EC2), or "" for an instance the twin does not have.
func (tw *Twin) MetadataURL(id string) string {
	tw.md.mu.Lock()
	defer tw.md.mu.Unlock()
	if s := tw.md.servers[id]; s != nil {
		return s.URL
	}
	return ""
}

// InterruptSpot gives instance id a spot interruption notice: its spot/instance-action answers
// action ("terminate", "stop" or "hibernate") at time at, as EC2 does two minutes before.
func (tw *Twin) InterruptSpot(id, action string, at time.Time) error {
	doc, _ := json.Marshal(map[string]string{"action": action, "time": at.UTC().Format(time.RFC3339)})
	tw.md.mu.Lock()
	defer tw.md.mu.Unlock()
	if tw.md.servers[id] == nil {
		return fmt.Errorf("no instance %s", id)
	}
	if tw.md.notices == nil {
		tw.md.notices = map[string]string{}
	}
	tw.md.notices[id] = string(doc)
	return nil
}

// serveMetadata starts instance id's metadata service.
func (tw *Twin) serveMetadata(id string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tw.serveIMDS(id, w, r) }))
	tw.md.mu.Lock()
	defer tw.md.mu.Unlock()
	if tw.md.servers == nil {
		tw.md.servers, tw.md.tokens = map[string]*httptest.Server{}, map[string]time.Time{}
	}
	tw.md.servers[id] = srv
}

// closeMetadata stops every metadata service.
func (tw *Twin) closeMetadata() {
	tw.md.mu.Lock()
	servers := tw.md.servers
	tw.md.servers = nil
	tw.md.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
}

func (tw *Twin) serveIMDS(id string, w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	if r.URL.Path == "/latest/api/token" {
		tw.issueToken(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "", http.StatusMethodNotAllowed)
		return
	}
	tw.md.mu.Lock()
	expiry, ok := tw.md.tokens[r.Header.Get(imdsTokenHeader)]
	notice := tw.md.notices[id]
	tw.md.mu.Unlock()
	if !ok || tw.opts.Now().After(expiry) {
		// IMDSv2 only: no token, or an expired one, is refused.
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	tw.mu.Lock()
	in := tw.instances[id]
	tw.advance(in, tw.opts.Now())
	c := *in
	tw.mu.Unlock()
	values := map[string]string{
		"/latest/meta-data/instance-id":                 c.ID,
		"/latest/meta-data/instance-type":               c.InstanceType,
		"/latest/meta-data/ami-id":                      c.ImageID,
		"/latest/meta-data/local-ipv4":                  c.PrivateIP,
		"/latest/meta-data/local-hostname":              c.PrivateDNSName(),
		"/latest/meta-data/placement/availability-zone": c.AvailabilityZone,
		"/latest/meta-data/placement/region":            c.Region,
		"/latest/meta-data/spot/instance-action":        notice,
	}
	if c.UserData != "" {
		b, err := base64.StdEncoding.DecodeString(c.UserData)
		if err != nil {
			http.Error(w, "user data is not base64", http.StatusInternalServerError)
			return
		}
		values["/latest/user-data"] = string(b)
	}
	v, ok := values[strings.TrimSuffix(r.URL.Path, "/")]
	if !ok || v == "" {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(v))
}

// issueToken answers PUT /latest/api/token with a session token for the TTL asked.
func (tw *Twin) issueToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "", http.StatusMethodNotAllowed)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(imdsTokenTTLHeader))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "", http.StatusBadRequest)
		return
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	tw.md.mu.Lock()
	tw.md.tokens[token] = tw.opts.Now().Add(time.Duration(ttl) * time.Second)
	tw.md.mu.Unlock()
	w.Header().Set(imdsTokenTTLHeader, strconv.Itoa(ttl))
	_, _ = w.Write([]byte(token))
}
