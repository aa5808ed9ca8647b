// Kubeconfig: herd up's administrator access to an instance's API server, for logs and debug
// access.

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/provider"
)

var _ provider.KubeAccessor = (*Provider)(nil)

// Kubeconfig implements provider.KubeAccessor: it reads the administrator kubeconfig the agent
// writes (mode 0600) into its state directory once the API server is up. Its server is the API
// server on the instance address, which this host reaches over the region's bridge.
func (p *Provider) Kubeconfig(ctx context.Context, name string) ([]byte, error) {
	if !provider.ValidName(name) {
		return nil, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	dir := p.InstanceDir(name)
	rec, err := readRecord(dir)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	if rec == nil {
		return nil, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	data, err := os.ReadFile(filepath.Join(dir, agentDirName, agent.KubeconfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("local: %s: %w", name, provider.ErrNoKubeAccess)
	}
	if err != nil {
		return nil, fmt.Errorf("local: %s: read the instance's kubeconfig: %w", name, err)
	}
	return data, nil
}
