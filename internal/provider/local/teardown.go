package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/mountinfo"
)

// Paths of the host the teardown reads; variables so that unit tests can point them elsewhere.
var (
	mountInfoPath    = "/proc/self/mountinfo"
	containerLogsDir = "/var/log/containers"
)

// cgroupHierarchies returns the mount points of every cgroup hierarchy (v1 controllers, the named
// systemd one, and the v2 "unified" one), from the mount table.
func cgroupHierarchies() ([]string, error) {
	mounts, err := mountinfo.ReadFile(mountInfoPath)
	if err != nil {
		return nil, err
	}
	return mountinfo.CgroupPoints(mounts), nil
}

// cgroupDirs returns every directory of the subtree root (e.g. "/herd-a") in every hierarchy,
// deepest first.
func cgroupDirs(hierarchies []string, root string) []string {
	var dirs []string
	for _, h := range hierarchies {
		top := filepath.Join(h, root)
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or the root does not exist in this hierarchy
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.SliceStable(dirs, func(i, j int) bool {
		return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/")
	})
	return dirs
}

// cgroupPIDs returns the pids in the subtree root of every hierarchy.
func cgroupPIDs(hierarchies []string, root string) map[int]bool {
	pids := map[int]bool{}
	for _, d := range cgroupDirs(hierarchies, root) {
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids[pid] = true
			}
		}
	}
	return pids
}

// instancePIDs returns every process of an instance: those in its cgroup subtree, those in its
// network namespace (netnsIno, 0 if unknown), and its agent found by command line (one that has
// not moved into its cgroup yet when a Create was interrupted). Other processes that merely name
// the instance directory (a user's tail -f of a log) are left alone.
func instancePIDs(hierarchies []string, root string, netnsIno uint64, dir string) map[int]bool {
	pids := cgroupPIDs(hierarchies, root)
	found := hostproc.Matching(func(pid int) bool {
		if pids[pid] {
			return false
		}
		if netnsIno != 0 && hostproc.InNetns(pid, netnsIno) {
			return true
		}
		return dir != "" && isAgentOf(hostproc.Cmdline(pid), filepath.Join(dir, agentDirName))
	})
	for pid := range found {
		pids[pid] = true
	}
	delete(pids, os.Getpid())
	return pids
}

// isAgentOf reports whether a command line is herd-agent's with "--state-dir <stateDir>" (the
// agent, or nsenter about to become it).
func isAgentOf(args []string, stateDir string) bool {
	// herd-agent, or `herd agent` as herd ran the agent before it had a binary of its own.
	isAgent := slices.Contains(args, "agent") || slices.ContainsFunc(args, func(a string) bool { return filepath.Base(a) == "herd-agent" })
	if !isAgent {
		return false
	}
	for i, a := range args {
		if a == "--state-dir" && i+1 < len(args) && args[i+1] == stateDir {
			return true
		}
		if a == "--state-dir="+stateDir {
			return true
		}
	}
	return false
}

// killAll SIGKILLs every process of the instance until none is left, thawing a frozen cgroup
// first (a frozen process cannot die).
func killAll(ctx context.Context, hierarchies []string, root string, netnsIno uint64, dir string, timeout time.Duration) error {
	return hostproc.KillAll(ctx, timeout, "every process of the instance", func() map[int]bool {
		for _, h := range hierarchies {
			f := filepath.Join(h, root, "freezer.state")
			if _, err := os.Stat(f); err == nil {
				_ = os.WriteFile(f, []byte("THAWED"), 0o644)
			}
		}
		return instancePIDs(hierarchies, root, netnsIno, dir)
	})
}

// removeCgroups removes the subtree root in every hierarchy, deepest first. A cgroup whose last
// process just died may stay busy for a moment: it retries until timeout.
func removeCgroups(ctx context.Context, hierarchies []string, root string, timeout time.Duration) error {
	var lastErr error
	err := hostproc.WaitFor(ctx, timeout, func() bool {
		lastErr = nil
		for _, d := range cgroupDirs(hierarchies, root) {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				lastErr = fmt.Errorf("rmdir %s: %w", d, err)
			}
		}
		return lastErr == nil && len(cgroupDirs(hierarchies, root)) == 0
	}, "the cgroups "+root+" to be removed")
	if err != nil {
		if lastErr != nil {
			return fmt.Errorf("%w: %w", err, lastErr)
		}
		return err
	}
	return nil
}

// mountsUnder returns the host's mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.ReadFile(mountInfoPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") > strings.Count(out[j], "/")
	})
	return out, nil
}

// unmountUnder lazily unmounts everything mounted at or under dir in the host's mount
// namespace, deepest first.
func unmountUnder(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// removeContainerLogLinks removes the kubelet's /var/log/containers symlinks that point into dir.
func removeContainerLogLinks(dir string) error {
	entries, err := os.ReadDir(containerLogsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", containerLogsDir, err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(containerLogsDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if target == dir || strings.HasPrefix(target, dir+"/") {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove %s: %w", p, err)
			}
		}
	}
	return nil
}

// teardown stops the agent, then kills and removes everything of the instance but its directory.
// Every step runs even when an earlier one failed, so that as much as possible goes.
func (p *Provider) teardown(ctx context.Context, name, dir string, rec *record) error {
	ns, veth, root := netnsName(name), vethName(name), cgroupRootOf(name)
	if rec != nil {
		if rec.Netns != "" {
			ns = rec.Netns
		}
		if rec.HostVeth != "" {
			veth = rec.HostVeth
		}
		if rec.CgroupRoot != "" {
			root = rec.CgroupRoot
		}
	}
	start := time.Now()
	if rec != nil && hostproc.Alive(rec.AgentPID, rec.AgentStartTime) {
		if err := syscall.Kill(rec.AgentPID, syscall.SIGTERM); err == nil {
			err := hostproc.WaitFor(ctx, p.opts.StopTimeout, func() bool { return !hostproc.Alive(rec.AgentPID, rec.AgentStartTime) }, "the agent to stop")
			if err != nil {
				p.log.Warn("the agent did not stop after SIGTERM; killing the instance", "instance", name, "err", err)
			}
			p.log.Debug("agent stopped", "instance", name, "seconds", time.Since(start).Seconds())
		}
	}
	// Whatever the context says from here on, nothing may be left half removed.
	ctx = context.WithoutCancel(ctx)
	hier, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	if err := killAll(ctx, hier, root, hostnet.NetnsInode(ns), dir, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, hier, root, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := hostnet.DeleteNetns(ctx, ns, veth); err != nil {
		errs = append(errs, err)
	}
	if err := removeContainerLogLinks(dir); err != nil {
		errs = append(errs, err)
	}
	p.log.Debug("instance torn down", "instance", name, "seconds", time.Since(start).Seconds(), "errors", len(errs))
	return errors.Join(errs...)
}
