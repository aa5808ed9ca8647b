package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
)

// TestIntegrationOrphansInProcess: herd up started beside an instance that no fleet owns lists it
// through the API with when it goes, deletes it once --orphan-grace is over, and counts it in
// /metrics; the API then lists no orphan.
func TestIntegrationOrphansInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(context.Background(), provider.InstanceSpec{Name: "bench-1-0", Image: "hello", Region: "bench"}); err != nil {
		t.Fatal(err)
	}
	c, cl := inProcessWith(t, func(o *controlplane.Options) {
		o.OrphanGrace = time.Second
		o.NewProvider = func(string, *slog.Logger) (provider.Provider, error) { return p, nil }
	})
	ctx := context.Background()
	// The controller's first pass runs as herd up starts.
	c.waitFor(10*time.Second, func() string {
		found, err := cl.Orphans(ctx)
		if err != nil || len(found) != 1 || found[0].Name != "bench-1-0" || found[0].DeleteAt == nil {
			return fmt.Sprintf("orphans listed: %+v %v, want bench-1-0 with when it goes", found, err)
		}
		return ""
	})
	cfg, err := client.LoadConfig(filepath.Join(c.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, func() string {
		code, body, err := c.scrape(cfg.Token)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("GET /metrics: %d %v", code, err)
		}
		if !strings.Contains(body, `herd_orphans_deleted_total{provider="fake"} 1`) {
			return "herd_orphans_deleted_total does not count the orphan"
		}
		if n := p.Calls("Delete"); n != 1 {
			return fmt.Sprintf("%d deletes", n)
		}
		return ""
	})
	if found, err := cl.Orphans(ctx); err != nil || len(found) != 0 {
		t.Fatalf("orphans listed after the deletion: %+v %v", found, err)
	}
}
