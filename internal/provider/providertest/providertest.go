// Package providertest is the conformance suite every provider must pass. It checks the contract
// written in package provider: idempotent create by name, labels kept, list by fleet, complete and
// idempotent delete, readiness reported. A provider's own tests call Run.
package providertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// Options tune the suite for a provider.
type Options struct {
	// Image is the image instances are created from.
	Image string
	// Options are passed as the region's provider options.
	Options map[string]string
	// ReadyTimeout bounds how long an instance may take to become Ready.
	ReadyTimeout time.Duration
	// AfterDelete, if set, checks that nothing of a deleted instance is left behind.
	AfterDelete func(t *testing.T, in provider.Instance)
}

// Run runs the suite against the provider newProvider returns. It creates two instances in all, so
// that it stays affordable for providers whose instances are real clusters.
func Run(t *testing.T, newProvider func(t *testing.T) provider.Provider, opts Options) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	p := newProvider(t)
	ctx := context.Background()
	spec := func(name, fleet string) provider.InstanceSpec {
		return provider.InstanceSpec{
			Name:    name,
			Image:   opts.Image,
			Region:  "r1",
			Options: opts.Options,
			Labels:  map[string]string{v1alpha1.LabelFleet: fleet, v1alpha1.LabelRevision: fleet + "-1", v1alpha1.LabelRegion: "r1"},
		}
	}

	t.Run("RejectsBadName", func(t *testing.T) {
		if _, err := p.Create(ctx, spec("Not_A_Label", "a")); err == nil {
			t.Fatal("Create accepted a name that is not a DNS label")
		}
	})

	a := spec("conf-a-1", "conf-a")
	b := spec("conf-b-1", "conf-b")
	first, err := p.Create(ctx, a)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = p.Delete(context.Background(), a.Name); _ = p.Delete(context.Background(), b.Name) })

	t.Run("CreateIsIdempotent", func(t *testing.T) {
		again, err := p.Create(ctx, a)
		if err != nil {
			t.Fatalf("second Create: %v", err)
		}
		if again.ProviderID != first.ProviderID {
			t.Fatalf("second Create made a new instance: %q != %q", again.ProviderID, first.ProviderID)
		}
		all, err := p.List(ctx, provider.ListOptions{Fleet: "conf-a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 1 {
			t.Fatalf("List after two creates of one name: %d instances, want 1", len(all))
		}
	})

	if _, err := p.Create(ctx, b); err != nil {
		t.Fatalf("Create: %v", err)
	}

	t.Run("ListFiltersByFleetAndKeepsLabels", func(t *testing.T) {
		got, err := p.List(ctx, provider.ListOptions{Fleet: "conf-b"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Name != b.Name {
			t.Fatalf("List(conf-b) = %v, want only %s", names(got), b.Name)
		}
		for k, v := range b.Labels {
			if got[0].Labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, got[0].Labels[k], v)
			}
		}
		all, err := p.List(ctx, provider.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !contains(all, a.Name) || !contains(all, b.Name) {
			t.Fatalf("List() = %v, want both %s and %s", names(all), a.Name, b.Name)
		}
	})

	t.Run("BecomesReady", func(t *testing.T) {
		in := WaitForState(t, p, a.Name, provider.StateReady, opts.ReadyTimeout)
		if in.Address == "" {
			t.Error("a Ready instance has no address")
		}
	})

	t.Run("DeleteIsCompleteAndIdempotent", func(t *testing.T) {
		in, err := p.Get(ctx, a.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Delete(ctx, a.Name); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if _, err := p.Get(ctx, a.Name); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		if err := p.Delete(ctx, a.Name); err != nil {
			t.Fatalf("second Delete: %v", err)
		}
		if opts.AfterDelete != nil {
			opts.AfterDelete(t, in)
		}
		rest, err := p.List(ctx, provider.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if contains(rest, a.Name) || !contains(rest, b.Name) {
			t.Fatalf("List after deleting %s = %v", a.Name, names(rest))
		}
	})
}

// WaitForState polls Get until the instance reaches want, failing the test at the deadline or if
// the instance fails while another state was wanted.
func WaitForState(t *testing.T, p provider.Provider, name string, want provider.State, timeout time.Duration) provider.Instance {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last provider.Instance
	for time.Now().Before(deadline) {
		in, err := p.Get(context.Background(), name)
		if err == nil {
			last = in
			if in.State == want {
				return in
			}
			if in.State == provider.StateFailed {
				t.Fatalf("%s failed while waiting for %s: %s", name, want, in.Reason)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not %s after %s (last state %s %s)", name, want, timeout, last.State, last.Reason)
	return last
}

func names(in []provider.Instance) []string {
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = x.Name
	}
	return out
}

func contains(in []provider.Instance, name string) bool {
	for _, x := range in {
		if x.Name == name {
			return true
		}
	}
	return false
}
