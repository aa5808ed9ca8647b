// Package imagetest puts node image bundles in an image store for tests that need an image to
// exist but boot nothing from it.
package imagetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"herd.dev/herd/internal/image"
)

// WriteBundle puts a minimal bundle named name into the data directory's image store and
// returns its digest.
func WriteBundle(t testing.TB, dataDir, name string) string {
	t.Helper()
	cfg, err := json.Marshal(image.Config{SchemaVersion: image.SchemaVersion, Name: name, PauseImage: image.PauseImage})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cfg)
	h := hex.EncodeToString(sum[:])
	root := image.StoreDir(dataDir)
	for _, d := range []string{filepath.Join(root, "bundles", h), filepath.Join(root, "names")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bundles", h, image.ConfigFile), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "names", name), []byte("sha256:"+h+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + h
}
