package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/statefile"
)

func TestValidateOptionsNamesTheFieldAndTheFix(t *testing.T) {
	p := &Provider{}
	path := field.NewPath("spec", "regions").Index(0).Child("options")
	cases := []struct {
		opts map[string]string
		want []string // substrings of the errors, in order; none: valid
	}{
		{map[string]string{}, nil},
		{map[string]string{"latency": "40ms", "jitter": "5ms", "loss": "0.5%"}, nil},
		{map[string]string{"loss": "0.2"}, nil},
		{map[string]string{"loss": "100%"}, nil},
		{map[string]string{"latency": "-1ms"}, []string{`spec.regions[0].options.latency: Invalid value: "-1ms": must not be negative`}},
		{map[string]string{"latency": "40"}, []string{"options.latency", "must be a duration such as 40ms"}},
		{map[string]string{"jitter": "2h"}, []string{"options.jitter", "must be at most 1m0s"}},
		{map[string]string{"loss": "120%"}, []string{"options.loss", "must be at most 100%"}},
		{map[string]string{"loss": "-1%"}, []string{"options.loss", "must not be negative"}},
		{map[string]string{"loss": "lots"}, []string{"options.loss", "must be a percentage"}},
		{map[string]string{"loss": "NaN%"}, []string{"options.loss", "must be a percentage"}},
		{map[string]string{"latancy": "40ms"}, []string{"options.latancy: Forbidden", "knows latency, jitter, loss"}},
	}
	for _, tc := range cases {
		errs := p.ValidateOptions(path, tc.opts)
		got := errs.ToAggregate()
		if len(tc.want) == 0 {
			if got != nil {
				t.Errorf("%v: %v, want valid", tc.opts, got)
			}
			continue
		}
		if got == nil {
			t.Errorf("%v: valid, want %q", tc.opts, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("%v: %v, want it to contain %q", tc.opts, got, w)
			}
		}
	}
	s, errs := netlab.ParseShape(path, map[string]string{"latency": "40ms", "jitter": "4ms", "loss": "20%"})
	if len(errs) > 0 || s != (netlab.Shape{Latency: 40 * time.Millisecond, Jitter: 4 * time.Millisecond, Loss: 0.2}) {
		t.Errorf("ParseShape = %+v, %v", s, errs)
	}
}

// regionOwned is what a test's region networks make on the host.
func regionOwned(p *Provider, regions ...string) localtest.Owned {
	o := localtest.Owned{Dirs: []string{p.opts.DataDir}, Gone: []string{filepath.Join(p.dir, netSubdir)}}
	for _, r := range regions {
		router, internet, veth := p.Lab().RegionHostNames(r)
		o.Netns = append(o.Netns, router, internet)
		o.Links = append(o.Links, veth, p.BridgeName(r))
	}
	return o
}

// TestRegionNetworkAfterCrashes: whatever a crash leaves of a region's network, the next start
// (or the next EnsureRegion) finishes or removes it.
func TestRegionNetworkAfterCrashes(t *testing.T) {
	requireRoot(t)
	localtest.Exclusive(t) // the leak check compares host-wide state that real instances change
	before := localtest.Take(t)
	p, _ := newTestProvider(t, testExecutable(t))
	ctx := context.Background()
	t.Cleanup(func() {
		if err := p.Lab().RemoveNetworks(ctx); err != nil {
			t.Errorf("RemoveNetworks: %v", err)
		}
		localtest.AssertClean(t, before, regionOwned(p, "r1", "r2"))
	})
	restart := func() *Provider {
		t.Helper()
		q, err := New(p.opts)
		if err != nil {
			t.Fatal(err)
		}
		q.deps = p.deps
		return q
	}
	if _, err := p.Lab().EnsureNetwork(ctx, "r1", map[string]string{"latency": "5ms"}); err != nil {
		t.Fatal(err)
	}
	rn := readNetRecord(t, p, "r1")
	if fi, err := os.Stat(netRecordPath(p, "r1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode: %v %v", fi, err)
	}

	// The relay died: the next start runs it again.
	_ = syscall.Kill(rn.RelayPID, syscall.SIGKILL)
	if err := hostproc.WaitFor(ctx, 5*time.Second, func() bool { return !hostproc.Alive(rn.RelayPID, rn.RelayStart) }, "the relay to die"); err != nil {
		t.Fatal(err)
	}
	p = restart()
	rn2 := readNetRecord(t, p, "r1")
	if !hostproc.Alive(rn2.RelayPID, rn2.RelayStart) || rn2.RelayPID == rn.RelayPID {
		t.Fatalf("after a restart the relay is not running again: %+v", rn2)
	}

	// A crash after starting a relay and before recording it: the next EnsureNetwork stops the
	// stray one rather than starting a second on the same devices.
	stray := rn2.RelayPID
	patchNetRecord(t, p, "r1", map[string]any{"relayPid": 0, "relayStart": 0})
	if _, err := p.Lab().EnsureNetwork(ctx, "r1", map[string]string{"latency": "5ms"}); err != nil {
		t.Fatal(err)
	}
	rn3 := readNetRecord(t, p, "r1")
	if hostproc.Alive(stray, 0) || !hostproc.Alive(rn3.RelayPID, rn3.RelayStart) {
		t.Fatalf("stray relay %d alive: %v; recorded relay: %+v", stray, hostproc.Alive(stray, 0), rn3)
	}

	// A crash in the middle of a removal: the next start finishes it.
	patchNetRecord(t, p, "r1", map[string]any{"phase": "removing"})
	p = restart()
	router, _, veth := p.Lab().RegionHostNames("r1")
	if hostnet.NetnsExists(router) || hostnet.LinkExists(veth) || hostproc.Alive(rn3.RelayPID, rn3.RelayStart) {
		t.Fatalf("after a restart the half-removed region is still there")
	}
	if _, err := os.Stat(filepath.Dir(netRecordPath(p, "r1"))); !os.IsNotExist(err) {
		t.Fatalf("the half-removed region's record is still there: %v", err)
	}

	// A crash in the middle of a creation, with only the router's namespace made.
	router2, _, _ := p.Lab().RegionHostNames("r2")
	if err := statefile.WriteJSON(netRecordPath(p, "r2"), map[string]any{"region": "r2", "phase": "creating"}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "add", router2).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	p = restart()
	if hostnet.NetnsExists(router2) {
		t.Fatal("after a restart the half-made region's router namespace is still there")
	}
}

// netRecordPath is where the lab keeps a region network's record: the layout a running
// installation has, which a new herd must adopt as it is.
func netRecordPath(p *Provider, region string) string {
	return filepath.Join(p.dir, "net", "regions", region, "network.json")
}

// netRecord is what the test reads of a region network's record.
type netRecord struct {
	Phase      string `json:"phase"`
	RelayPID   int    `json:"relayPid"`
	RelayStart uint64 `json:"relayStart"`
}

func readNetRecord(t *testing.T, p *Provider, region string) netRecord {
	t.Helper()
	var r netRecord
	if found, err := statefile.ReadJSON(netRecordPath(p, region), &r); err != nil || !found {
		t.Fatalf("the record of region %s: found %v, %v", region, found, err)
	}
	return r
}

// patchNetRecord sets fields of a region network's record, as a crash at that point leaves it.
func patchNetRecord(t *testing.T, p *Provider, region string, fields map[string]any) {
	t.Helper()
	rec := map[string]any{}
	if found, err := statefile.ReadJSON(netRecordPath(p, region), &rec); err != nil || !found {
		t.Fatalf("the record of region %s: found %v, %v", region, found, err)
	}
	for k, v := range fields {
		rec[k] = v
	}
	if err := statefile.WriteJSON(netRecordPath(p, region), rec); err != nil {
		t.Fatal(err)
	}
}
