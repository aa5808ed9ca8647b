package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"herd.dev/herd/internal/image/bundle"
)

// loadBundle reads the bundle in dir and checks its files against their digests: every file, or
// without images all but the image tars.
func loadBundle(dir string, images bool) (bundle.Bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return bundle.Bundle{}, err
	}
	data, err := os.ReadFile(filepath.Join(abs, bundle.ConfigFile))
	if err != nil {
		return bundle.Bundle{}, fmt.Errorf("bundle: %w (is --bundle a node image bundle directory?)", err)
	}
	var cfg bundle.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return bundle.Bundle{}, fmt.Errorf("bundle %s: %s: %w", abs, bundle.ConfigFile, err)
	}
	if cfg.SchemaVersion != bundle.SchemaVersion {
		return bundle.Bundle{}, fmt.Errorf("bundle %s: schema version %d, this herd reads %d: rebuild it with this herd's herd image build", abs, cfg.SchemaVersion, bundle.SchemaVersion)
	}
	sum := sha256.Sum256(data)
	b := bundle.Bundle{Digest: "sha256:" + hex.EncodeToString(sum[:]), Dir: abs, Config: cfg}
	verify := b.Verify
	if !images {
		verify = b.VerifyManifests
	}
	if err := verify(); err != nil {
		return bundle.Bundle{}, err
	}
	return b, nil
}

// warmStore is the directory of the bundle's warm store, "" if it has none.
func warmStore(b bundle.Bundle) string {
	if len(b.Config.Store) == 0 {
		return ""
	}
	return b.Path(bundle.StoreDir)
}

// readManifests reads the bundle's manifests in order.
func readManifests(b bundle.Bundle) ([]manifestFile, error) {
	var out []manifestFile
	for _, m := range b.Config.Manifests {
		data, err := os.ReadFile(b.Path(m.File))
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", b.Digest, err)
		}
		out = append(out, manifestFile{name: m.File, data: data, namespace: m.Namespace})
	}
	return out, nil
}
