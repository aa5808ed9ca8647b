package controlplane

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
)

// newAWSProvider is herd's EC2 provider for the data directory: its installation id names the
// data directory's key, so that a restarted herd up adopts the instances it launched and no
// other herd's, and each instance's user data carries its agent's credential from that key. It
// reaches no AWS API until a region runs on it, with the SDK's default credential chain.
func newAWSProvider(dataDir string, log *slog.Logger) (provider.Provider, error) {
	keys, err := agentauth.Open(dataDir)
	if err != nil {
		return nil, err
	}
	p, err := aws.New(aws.Options{
		Installation: keys.ID(), AgentKeys: keys, Logger: log,
		StateDir: filepath.Join(dataDir, "providers", aws.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", aws.Name, err)
	}
	return p, nil
}

// withAWS adds the aws provider to providers unless it is there (the default provider): a
// region of any fleet may run on EC2 with `provider: aws`, whatever herd up's default is.
func withAWS(providers map[string]provider.Provider, dataDir string, log *slog.Logger) error {
	if _, ok := providers[aws.Name]; ok {
		return nil
	}
	p, err := newAWSProvider(dataDir, log)
	if err != nil {
		return err
	}
	providers[aws.Name] = p
	return nil
}
