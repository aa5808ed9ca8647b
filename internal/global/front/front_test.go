package front

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/lb"
)

func TestConfig(t *testing.T) {
	cfg := Config(Listener{Name: "web/http", Fleet: "web", Address: "127.0.0.1:0", HealthPath: "/healthz",
		Regions: []Region{{Name: "eu", Address: "10.0.0.1:80"}, {Name: "us", Address: "10.0.0.2:80"}}})
	if err := cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("the front door's config is invalid: %v", err)
	}
	l := cfg.Listeners[0]
	if l.GroupPolicy != lb.GroupNearest || !l.HealthCheck.CloseOnUnhealthy || l.Retry.Budget != 1 || len(l.Groups) != 2 ||
		l.Groups[1].Name != "us" || l.Groups[1].Targets[0].Address != "10.0.0.2:80" {
		t.Errorf("config %+v: want one group per region, nearest, closing on unhealthy, every request retryable", l)
	}
	bad := Config(Listener{Name: "web/http", Fleet: "web", Address: "127.0.0.1:0", Regions: []Region{{Name: "eu"}}})
	err := bad.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "listeners[0].groups[0].targets[0].address: required") {
		t.Errorf("a region without an address: %v, want the field named", err)
	}
}

// TestFrontSurvivesTheLossOfARegion: two regional load balancers' stand-ins behind a real front
// door; the region serving the load dies under it, and no GET fails.
func TestFrontSurvivesTheLossOfARegion(t *testing.T) {
	var hits [2]atomic.Int64
	var regions [2]*httptest.Server
	for i := range regions {
		regions[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				hits[i].Add(1)
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(regions[i].Close)
	}
	cfg := Config(Listener{Name: "web/http", Fleet: "web", Address: "127.0.0.1:0", HealthPath: "/healthz",
		Regions: []Region{{Name: "a", Address: regions[0].Listener.Addr().String()}, {Name: "b", Address: regions[1].Listener.Addr().String()}}})
	f := lb.New(lb.Options{})
	if err := f.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for healthy := 0; healthy < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("regions not healthy: %+v", f.Health())
		}
		time.Sleep(10 * time.Millisecond)
		healthy = 0
		for _, h := range f.Health() {
			if h.State == lb.StateHealthy {
				healthy++
			}
		}
	}

	url := "http://" + f.Addr("web/http").String() + "/"
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(url)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	for ok.Load() < 200 {
		time.Sleep(5 * time.Millisecond)
	}
	// The nearest region takes every request (on loopback the two are a few microseconds apart).
	serving := 0
	if hits[1].Load() > hits[0].Load() {
		serving = 1
	}
	regions[serving].Listener.Close()
	regions[serving].CloseClientConnections()
	before := ok.Load()
	for ok.Load() < before+500 {
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d GETs failed when region %d died", failed.Load(), ok.Load()+failed.Load(), serving)
	}
	if hits[1-serving].Load() < 500 {
		t.Errorf("the other region took %d requests, want the 500 after the loss", hits[1-serving].Load())
	}
}
