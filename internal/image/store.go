package image

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/internal/image/bundle"
)

// ErrNotFound is wrapped by the errors of Resolve, Get and Remove when no bundle matches.
var ErrNotFound = errors.New("node image not found")

// StoreDir is where herd keeps node image bundles under its data directory: <dataDir>/images.
func StoreDir(dataDir string) string {
	return filepath.Join(dataDir, "images")
}

// Store is a directory of bundles, named by digest, with an index from NodeImage names to the
// digest last built under that name:
//
//	<root>/bundles/<hex>/   one bundle (bundle.json, manifests/, images/)
//	<root>/names/<name>     the digest last built as <name>
//	<root>/tmp/             builds in progress; renamed into bundles/ only when complete
//
// Every change is a rename, so readers never see a partial bundle or index entry, and several
// processes may use one store at once. Directories are created mode 0700.
type Store struct {
	root string
}

// NewStore returns the store rooted at dir. Nothing is created until a bundle is written.
func NewStore(dir string) *Store {
	return &Store{root: dir}
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

func (s *Store) bundlesDir() string { return filepath.Join(s.root, "bundles") }
func (s *Store) namesDir() string   { return filepath.Join(s.root, "names") }
func (s *Store) tmpDir() string     { return filepath.Join(s.root, "tmp") }

// init creates the store's directories.
func (s *Store) init() error {
	for _, d := range []string{s.root, s.bundlesDir(), s.namesDir(), s.tmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("image store: %w", err)
		}
	}
	return nil
}

// Resolve turns a reference into a bundle digest. A reference is a NodeImage name (the bundle
// last built under it), a full digest "sha256:<64 hex>", or a unique prefix of a digest's hex of
// at least 4 digits, with or without "sha256:" (as `herd image ls` shows it).
func (s *Store) Resolve(ref string) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("%w: empty reference: give a NodeImage name or a digest (sha256:...)", ErrNotFound)
	}
	if _, ok := parseDigest(ref); ok {
		if _, err := os.Stat(s.bundleDir(ref)); err != nil {
			return "", fmt.Errorf("%w: no bundle %s in %s: build it with herd image build", ErrNotFound, ref, s.root)
		}
		return ref, nil
	}
	if prefix, ok := strings.CutPrefix(ref, "sha256:"); ok {
		return s.resolvePrefix(ref, prefix)
	}
	if !strings.ContainsAny(ref, "/\\") && ref != "." && ref != ".." {
		data, err := os.ReadFile(filepath.Join(s.namesDir(), ref))
		if err == nil {
			d := strings.TrimSpace(string(data))
			if _, ok := parseDigest(d); !ok {
				return "", fmt.Errorf("image store: name index entry %s is corrupt (%q): rebuild the image with herd image build", ref, d)
			}
			return d, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("image store: %w", err)
		}
	}
	if len(ref) >= 4 && isHex(ref) {
		if d, err := s.resolvePrefix(ref, ref); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no node image named %q in %s: build it with herd image build -f image.yaml, or list them with herd image ls", ErrNotFound, ref, s.root)
}

func (s *Store) resolvePrefix(ref, prefix string) (string, error) {
	if len(prefix) < 4 || !isHex(prefix) {
		return "", fmt.Errorf("%w: %q is not a digest: want sha256: and at least 4 hex digits", ErrNotFound, ref)
	}
	hexes, err := s.bundleHexes()
	if err != nil {
		return "", err
	}
	var found []string
	for _, h := range hexes {
		if strings.HasPrefix(h, prefix) {
			found = append(found, "sha256:"+h)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w: no bundle with digest %s in %s", ErrNotFound, ref, s.root)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("digest prefix %s is ambiguous (%d bundles match): give more digits", ref, len(found))
}

func (s *Store) bundleDir(digest string) string {
	return filepath.Join(s.bundlesDir(), strings.TrimPrefix(digest, "sha256:"))
}

// bundleHexes lists the hex digests of the stored bundles.
func (s *Store) bundleHexes() ([]string, error) {
	entries, err := os.ReadDir(s.bundlesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var out []string
	for _, e := range entries {
		if _, ok := parseDigest("sha256:" + e.Name()); ok && e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Get returns the bundle with the given digest ("sha256:<64 hex>"), checking that its
// bundle.json matches the digest. Use Resolve first for names and short digests.
func (s *Store) Get(digest string) (Bundle, error) {
	if _, ok := parseDigest(digest); !ok {
		return Bundle{}, fmt.Errorf("%q is not a bundle digest (sha256: and 64 hex digits): use Resolve for names and short digests", digest)
	}
	dir := s.bundleDir(digest)
	data, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Bundle{}, fmt.Errorf("%w: no bundle %s in %s", ErrNotFound, digest, s.root)
	}
	if err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	if got := bundle.DigestBytes(data); got != digest {
		return Bundle{}, fmt.Errorf("bundle %s: %s has digest %s: the bundle is corrupt; remove %s and rebuild it", digest, ConfigFile, got, dir)
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Bundle{}, fmt.Errorf("bundle %s: %s: %w", digest, ConfigFile, err)
	}
	if cfg.SchemaVersion != SchemaVersion {
		return Bundle{}, fmt.Errorf("bundle %s: schema version %d, this herd reads %d: rebuild it with this herd's herd image build", digest, cfg.SchemaVersion, SchemaVersion)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	return Bundle{
		Digest:  digest,
		Dir:     dir,
		Created: fi.ModTime(),
		Size:    cfg.Size() + int64(len(data)),
		Config:  cfg,
	}, nil
}

// List returns every bundle in the store, by name, newest first within a name. Bundles that
// cannot be read are skipped.
func (s *Store) List() ([]Bundle, error) {
	hexes, err := s.bundleHexes()
	if err != nil {
		return nil, err
	}
	out := make([]Bundle, 0, len(hexes))
	for _, h := range hexes {
		b, err := s.Get("sha256:" + h)
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Config.Name != out[j].Config.Name {
			return out[i].Config.Name < out[j].Config.Name
		}
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// Remove deletes the bundle a reference resolves to (see Resolve). If its name pointed to it, the
// name moves to the newest remaining bundle of that name, or is dropped. Callers must make sure no
// instance still boots from the bundle.
func (s *Store) Remove(ref string) error {
	digest, err := s.Resolve(ref)
	if err != nil {
		return err
	}
	b, err := s.Get(digest)
	if err != nil {
		// A corrupt bundle can still be removed.
		b = Bundle{Digest: digest, Dir: s.bundleDir(digest)}
	}
	if err := s.init(); err != nil {
		return err
	}
	// Move the bundle out of bundles/ first, so it disappears at once, then delete it.
	trash := filepath.Join(s.tmpDir(), "remove-"+strings.TrimPrefix(digest, "sha256:")[:12]+"-"+randomSuffix())
	if err := os.Rename(b.Dir, trash); err != nil {
		return fmt.Errorf("image store: remove %s: %w", digest, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("image store: remove %s: %w", digest, err)
	}
	name := b.Config.Name
	if name == "" {
		return nil
	}
	if cur, err := s.Resolve(name); err != nil || cur != digest {
		return nil
	}
	rest, err := s.List()
	if err != nil {
		return err
	}
	for _, o := range rest {
		if o.Config.Name == name {
			return s.setName(name, o.Digest)
		}
	}
	if err := os.Remove(filepath.Join(s.namesDir(), name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// setName points name at digest, atomically.
func (s *Store) setName(name, digest string) error {
	tmp := filepath.Join(s.tmpDir(), "name-"+name+"-"+randomSuffix())
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o600); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.namesDir(), name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// staleAfter is how old a leftover of an interrupted build or removal must be before a later
// build deletes it.
const staleAfter = 24 * time.Hour

// cleanStale deletes what interrupted builds left in tmp/.
func (s *Store) cleanStale(now time.Time) {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && now.Sub(fi.ModTime()) > staleAfter {
			os.RemoveAll(filepath.Join(s.tmpDir(), e.Name()))
		}
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
