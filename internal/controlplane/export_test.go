package controlplane

import (
	"log/slog"
	"testing"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
)

// UseFakeProvider makes Run use p as its fake provider until the test ends, so that the test can
// fail p's instances as a machine's death would.
func UseFakeProvider(t *testing.T, p *fake.Provider) {
	old := providerFactories[fake.Name]
	providerFactories[fake.Name] = func(string, *slog.Logger) (provider.Provider, error) { return p, nil }
	t.Cleanup(func() { providerFactories[fake.Name] = old })
}
