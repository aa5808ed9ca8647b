package local

import (
	"context"
	"net"
	"testing"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/providertest"
)

// regionIdentity names the region's bridge and router namespace as the kernel knows them: the
// bridge's interface index and the namespace's inode change when they are made again.
func regionIdentity(t *testing.T, p *Provider) (bridge int, router uint64) {
	t.Helper()
	ifc, err := net.InterfaceByName(p.BridgeName(testRegion))
	if err != nil {
		t.Fatalf("the bridge of region %s: %v", testRegion, err)
	}
	routerNs, _, _ := p.Lab().RegionHostNames(testRegion)
	ns := hostnet.NetnsInode(routerNs)
	if ns == 0 {
		t.Fatalf("region %s has no router namespace", testRegion)
	}
	return ifc.Index, ns
}

// TestFakeAgentKeptRegion: a region the controller keeps (a fleet names it) keeps its bridge and
// router namespace when its last instance goes, and its next instance uses them as they were;
// once no longer kept, and without instances, it is removed and nothing of it is left.
func TestFakeAgentKeptRegion(t *testing.T) {
	t.Setenv(fakeAgentEnv, "ok")
	a, b := uniqueName("ut-ka"), uniqueName("ut-kb")
	p, _, assertClean := newFakeAgentProvider(t, a, b)
	ctx := context.Background()
	if err := p.KeepRegions(ctx, []string{testRegion}); err != nil {
		t.Fatal(err)
	}
	boot := func(name string) {
		t.Helper()
		spec := provider.InstanceSpec{Name: name, Image: "fake", Region: testRegion, Labels: map[string]string{"herd.dev/fleet": "ut"}}
		if _, err := p.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		providertest.WaitForState(t, p, name, provider.StateReady, 10*time.Second)
	}
	boot(a)
	bridge, router := regionIdentity(t, p)
	// Scaled to zero: the region stays as it is.
	if err := p.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if gotB, gotR := regionIdentity(t, p); gotB != bridge || gotR != router {
		t.Fatalf("after the last instance went: bridge index %d, router namespace inode %d; want %d, %d (kept)", gotB, gotR, bridge, router)
	}
	// And back: the new instance uses the same bridge and router.
	boot(b)
	if gotB, gotR := regionIdentity(t, p); gotB != bridge || gotR != router {
		t.Fatalf("after scaling back: bridge index %d, router namespace inode %d; want %d, %d (not made again)", gotB, gotR, bridge, router)
	}
	if err := p.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	// No fleet names the region any more: it goes at once.
	if err := p.KeepRegions(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if hostnet.LinkExists(p.BridgeName(testRegion)) {
		t.Error("the bridge of a region no longer kept, without instances, is left")
	}
	assertClean()
}
