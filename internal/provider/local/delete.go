// Delete: marking the instance as deleting, tearing it down (teardown.go) and releasing its
// region's bridge and the host's settings with the last instance; and KillInstance, for chaos.

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/statefile"
)

var _ provider.InstanceKiller = (*Provider)(nil)

// Delete implements provider.Provider, as the contract says: SIGTERM the agent and wait for it,
// then kill whatever is left in the instance's cgroup, remove its cgroups, mounts, network
// namespace, veth, log symlinks and directory, and the region's bridge with its last instance.
// It works on what an interrupted Create or Delete left, and on a missing instance.
func (p *Provider) Delete(ctx context.Context, name string) error {
	if !provider.ValidName(name) {
		return nil
	}
	dir := p.InstanceDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lk, err := statefile.Lock(filepath.Join(dir, lockFileName))
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	defer lk.Unlock()
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	if err := p.destroy(ctx, name, dir, rec); err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	p.log.Info("instance deleted", "instance", name)
	return nil
}

// destroy removes everything of an instance, its directory last, and the region's bridge if it
// was the region's last instance. The caller holds the instance lock.
func (p *Provider) destroy(ctx context.Context, name, dir string, rec *record) error {
	if rec != nil && rec.Phase != phaseDeleting {
		rec.Phase = phaseDeleting
		if err := writeRecord(dir, rec); err != nil {
			return err
		}
	}
	if err := p.teardown(ctx, name, dir, rec); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if rec != nil && rec.Bridge != "" {
		if err := p.releaseBridge(ctx, rec.Spec.Region, rec.Bridge); err != nil {
			return err
		}
	}
	// The instance is gone whatever happens here: a failed restore is reported, not retried by
	// deleting again (the next herd up, or the next last deletion, tries again).
	if err := p.withProviderLock(p.restoreHostSettings); err != nil {
		p.log.Warn("the host's kernel settings from before herd's instances could not be restored", "err", err)
	}
	return nil
}

// KillInstance implements provider.InstanceKiller: SIGKILL to every process of the instance (its
// agent, its Kubernetes, its pods), as a crash of its machine would; the record and the
// instance's resources stay, and the instance reads Failed (its agent is gone) until Delete.
func (p *Provider) KillInstance(ctx context.Context, name string) error {
	if !provider.ValidName(name) {
		return fmt.Errorf("kill instance %q: %w", name, provider.ErrNotFound)
	}
	dir := p.InstanceDir(name)
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("kill instance %s: %w", name, err)
	}
	if rec == nil {
		return fmt.Errorf("kill instance %s: %w", name, provider.ErrNotFound)
	}
	ns, root := netnsName(name), cgroupRootOf(name)
	if rec.Netns != "" {
		ns = rec.Netns
	}
	if rec.CgroupRoot != "" {
		root = rec.CgroupRoot
	}
	hier, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	if err := killAll(ctx, hier, root, hostnet.NetnsInode(ns), dir, 15*time.Second); err != nil {
		return fmt.Errorf("kill instance %s: %w", name, err)
	}
	p.log.Warn("instance killed (SIGKILL of every process)", "instance", name)
	return nil
}
