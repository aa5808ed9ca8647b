package fake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/providertest"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) provider.Provider {
		p, err := New(Options{BootDelay: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{Image: "sha256:abc", ReadyTimeout: 5 * time.Second})
}

func TestConformancePersistent(t *testing.T) {
	dir := t.TempDir()
	providertest.Run(t, func(t *testing.T) provider.Provider {
		p, err := New(Options{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{Image: "sha256:abc"})
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	p1, _ := New(Options{StateDir: dir})
	spec := provider.InstanceSpec{Name: "web-1", Image: "sha256:abc", Labels: map[string]string{"herd.dev/fleet": "web"}}
	first, err := p1.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Kill("web-1", "machine lost"); err != nil {
		t.Fatal(err)
	}
	p2, err := New(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p2.Get(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ProviderID != first.ProviderID || got.State != provider.StateFailed || got.Reason != "machine lost" {
		t.Fatalf("after restart: %+v", got)
	}
	again, err := p2.Create(ctx, spec)
	if err != nil || again.ProviderID != first.ProviderID {
		t.Fatalf("create after restart made a new instance: %v %+v", err, again)
	}
	if _, err := p2.Create(ctx, provider.InstanceSpec{Name: "web-2", Image: "x"}); err != nil {
		t.Fatal(err)
	}
	b, _ := p2.Get(ctx, "web-2")
	if b.Address == got.Address {
		t.Fatalf("two instances share address %s", b.Address)
	}
}

func TestInjectedFailures(t *testing.T) {
	p, _ := New(Options{})
	boom := errors.New("quota exceeded")
	p.FailNext("Create", boom)
	spec := provider.InstanceSpec{Name: "a", Image: "x"}
	if _, err := p.Create(context.Background(), spec); !errors.Is(err, boom) {
		t.Fatalf("got %v, want injected error", err)
	}
	if _, err := p.Create(context.Background(), spec); err != nil {
		t.Fatalf("second create: %v", err)
	}
	if p.Calls("Create") != 2 {
		t.Fatalf("calls = %d", p.Calls("Create"))
	}
}

// Unknown keys and bad durations are refused with their field path, naming the keys the provider
// knows.
func TestValidateOptions(t *testing.T) {
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := field.NewPath("spec", "regions").Index(1).Child("options")
	if errs := p.ValidateOptions(path, map[string]string{"bootDelay": "2s", "createDelay": "0s"}); len(errs) != 0 {
		t.Fatalf("valid options refused: %v", errs)
	}
	errs := p.ValidateOptions(path, map[string]string{"bootDelai": "2s", "createDelay": "soon"})
	got := errs.ToAggregate().Error()
	for _, want := range []string{
		"spec.regions[1].options.bootDelai: Forbidden: unknown option: the fake provider knows bootDelay, createDelay",
		`spec.regions[1].options.createDelay: Invalid value: "soon": must be a duration`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
	if len(errs) != 2 {
		t.Errorf("%d errors, want 2: %v", len(errs), errs)
	}
}

// Listing one fleet returns its instances only, also after deletions (the fleet index stays in
// step), and Kill and BreakImage tell subscribers the fleets they touched.
func TestFleetIndexAndNotify(t *testing.T) {
	ctx := context.Background()
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var told []string
	p.Notify(func(fleet string) { told = append(told, fleet) })
	for _, name := range []string{"a-1", "a-2", "b-1"} {
		spec := provider.InstanceSpec{Name: name, Image: "img-" + name[:1], Labels: map[string]string{"herd.dev/fleet": name[:1]}}
		if _, err := p.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Delete(ctx, "a-1"); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(ctx, provider.ListOptions{Fleet: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "a-2" {
		t.Fatalf("fleet a lists %+v, want a-2 alone", list)
	}
	if all, _ := p.List(ctx, provider.ListOptions{}); len(all) != 2 {
		t.Fatalf("%d instances in all, want 2", len(all))
	}
	if err := p.Kill("b-1", "machine lost"); err != nil {
		t.Fatal(err)
	}
	p.BreakImage("img-a", "broken")
	if strings.Join(told, ",") != "b,a" {
		t.Fatalf("subscribers were told of fleets %v, want b (Kill) then a (BreakImage)", told)
	}
}

// A region made to fail fails every call about it, and only about it.
func TestFailRegion(t *testing.T) {
	ctx := context.Background()
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name, region string) error {
		_, err := p.Create(ctx, provider.InstanceSpec{Name: name, Image: "img", Region: region,
			Labels: map[string]string{"herd.dev/fleet": "web", "herd.dev/region": region}})
		return err
	}
	if err := mk("web-a", "eu"); err != nil {
		t.Fatal(err)
	}
	down := errors.New("regional API unavailable")
	p.FailRegion("eu", down)
	if err := mk("web-b", "eu"); !errors.Is(err, down) {
		t.Fatalf("Create in the failed region: %v, want %v", err, down)
	}
	if _, err := p.List(ctx, provider.ListOptions{Fleet: "web", Region: "eu"}); !errors.Is(err, down) {
		t.Fatalf("List of the failed region: %v", err)
	}
	if err := p.Delete(ctx, "web-a"); !errors.Is(err, down) {
		t.Fatalf("Delete in the failed region: %v", err)
	}
	if err := mk("web-c", "us"); err != nil {
		t.Fatalf("Create in another region: %v", err)
	}
	if l, err := p.List(ctx, provider.ListOptions{Fleet: "web", Region: "us"}); err != nil || len(l) != 1 || l[0].Name != "web-c" {
		t.Fatalf("List of another region: %v, %v", l, err)
	}
	p.FailRegion("eu", nil)
	if l, err := p.List(ctx, provider.ListOptions{Fleet: "web", Region: "eu"}); err != nil || len(l) != 1 || l[0].Name != "web-a" {
		t.Fatalf("List of the region back: %v, %v", l, err)
	}
}
