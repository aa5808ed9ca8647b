// The bundle's images in each instance's containerd store before its agent starts, so that the
// boot imports nothing: prepared once per bundle in herd's cache, cloned with hard links.

package local

import (
	"context"
	"path/filepath"

	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/image/containerdstore"
	"herd.dev/herd/internal/kubebin"
)

// preloadImages gives the agent state dir a containerd store that holds b's images, unpacked,
// and says whether it did: not for a bundle without images. The store is made once per bundle
// under herd's cache (<cache>/containerd/<hex>; the first instance of a bundle waits the imports
// its boot would have taken), and each instance gets a clone of it.
func preloadImages(ctx context.Context, b image.Bundle, stateDir string) (bool, error) {
	if len(b.Config.Images) == 0 {
		return false, nil
	}
	cache, err := kubebin.CacheDir()
	if err != nil {
		return false, err
	}
	root, err := containerdstore.Prepared(ctx, filepath.Join(cache, "containerd"), b)
	if err != nil {
		return false, err
	}
	return true, containerdstore.Clone(root, upstream.ContainerdRoot(stateDir))
}
