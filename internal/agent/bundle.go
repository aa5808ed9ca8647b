package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"herd.dev/herd/internal/image"
)

// loadBundle reads the bundle in dir and checks every file of it against its digests.
func loadBundle(dir string) (image.Bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return image.Bundle{}, err
	}
	data, err := os.ReadFile(filepath.Join(abs, image.ConfigFile))
	if err != nil {
		return image.Bundle{}, fmt.Errorf("bundle: %w (is --bundle a node image bundle directory?)", err)
	}
	var cfg image.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return image.Bundle{}, fmt.Errorf("bundle %s: %s: %w", abs, image.ConfigFile, err)
	}
	if cfg.SchemaVersion != image.SchemaVersion {
		return image.Bundle{}, fmt.Errorf("bundle %s: schema version %d, this herd reads %d: rebuild it with this herd's herd image build", abs, cfg.SchemaVersion, image.SchemaVersion)
	}
	sum := sha256.Sum256(data)
	b := image.Bundle{Digest: "sha256:" + hex.EncodeToString(sum[:]), Dir: abs, Config: cfg}
	if err := b.Verify(); err != nil {
		return image.Bundle{}, err
	}
	return b, nil
}

// readManifests reads the bundle's manifests in order.
func readManifests(b image.Bundle) ([]manifestFile, error) {
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
