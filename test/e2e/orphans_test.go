package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// TestIntegrationOrphanCollected: a real instance created through the local provider with no
// record, as a benchmark harness killed mid-run leaves one (no fleet label, a region of its own),
// is listed by herd get instances --orphans as soon as herd up starts on the data directory, and
// deleted by it once the grace period is over (within the grace period and one resync), with an
// OrphanDeleted event and herd_orphans_deleted_total counting it; its processes, namespaces,
// mounts, cgroups, links and directory are gone, and the host's kernel settings are back as they
// were before it started.
func TestIntegrationOrphanCollected(t *testing.T) {
	const grace, resync = 15 * time.Second, 5 * time.Minute // resync: the controller's default
	e := newEnv(t, withHello)
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })

	p, err := local.New(local.Options{DataDir: e.data, HerdBinary: e.bin})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name, region := fmt.Sprintf("bench-%d-0", time.Now().UnixNano()%100000), "bench"
	e.created[name] = true
	e.regions = append(e.regions, region)
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: name, Image: "hello", Region: region}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(bootLimit, time.Second, func() string {
		in, err := p.Get(ctx, name)
		if err != nil || in.State != provider.StateReady {
			return fmt.Sprintf("the harness's instance is not Ready: %+v %v", in, err)
		}
		return ""
	})
	_, _, cgroup := local.HostNames(name)
	if pids, err := localtest.CgroupPIDs(cgroup); err != nil || len(pids) == 0 {
		t.Fatalf("the instance runs no process to leave behind: %v %v", pids, err)
	}

	e.upArgs = []string{"--orphan-grace", grace.String()}
	e.startUp()
	up := time.Now()
	var orphan v1alpha1.Orphan
	e.waitFor(30*time.Second, 200*time.Millisecond, func() string {
		out, err := e.herd("get", "instances", "--orphans", "-o", "json")
		var list []v1alpha1.Orphan
		if err != nil || json.Unmarshal([]byte(out), &list) != nil {
			return "herd get instances --orphans: " + out
		}
		if len(list) != 1 || list[0].Name != name {
			return fmt.Sprintf("herd get instances --orphans lists %+v, want %s", list, name)
		}
		orphan = list[0]
		return ""
	})
	if orphan.Provider != local.Name || orphan.Region != region || orphan.DeleteAt == nil || !strings.Contains(orphan.Why, v1alpha1.LabelFleet) {
		t.Fatalf("orphan listed as %+v: want provider local, region %s, when it goes and why", orphan, region)
	}
	if out, err := e.herd("get", "instances", "--orphans"); err != nil || !strings.Contains(out, name) || !strings.Contains(out, "DELETE-IN") {
		t.Fatalf("herd get instances --orphans: %v\n%s", err, out)
	}

	cfg, err := client.LoadConfig(filepath.Join(e.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	api := client.New(cfg)
	e.waitFor(grace+resync, time.Second, func() string {
		if _, err := p.Get(ctx, name); !errors.Is(err, provider.ErrNotFound) {
			return fmt.Sprintf("the orphan is still there %s after herd up started: %v", time.Since(up).Round(time.Second), err)
		}
		evs, err := api.ListEvents(ctx, "Instance/"+name, 0)
		if err != nil {
			return err.Error()
		}
		for _, ev := range evs {
			if ev.Reason == "OrphanDeleted" {
				return ""
			}
		}
		return fmt.Sprintf("no OrphanDeleted event about %s: %+v", name, evs)
	})
	t.Logf("orphan deleted %s after herd up started (grace period %s)", time.Since(up).Round(time.Second), grace)

	// While herd up runs on: nothing of the instance or its region is left, and the kernel
	// settings are the host's own again.
	router, internet, veth := p.Lab().RegionHostNames(region)
	ns, hostVeth, _ := local.HostNames(name)
	localtest.AssertClean(t, before, localtest.Owned{
		Dirs: []string{p.InstanceDir(name)}, Gone: []string{p.InstanceDir(name)},
		Netns: []string{ns, router, internet}, Links: []string{hostVeth, veth, p.BridgeName(region)},
		Cgroups: []string{strings.TrimPrefix(cgroup, "/")},
	})
	if got := scrapeOne(t, cfg, `herd_orphans_deleted_total{provider="local"}`); got != "1" {
		t.Fatalf("herd_orphans_deleted_total{provider=\"local\"} is %q, want 1", got)
	}
}

// scrapeOne returns the value of one series of herd up's /metrics, "" when it has none.
func scrapeOne(t *testing.T, cfg *client.Config, series string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, cfg.Server+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cfg.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
