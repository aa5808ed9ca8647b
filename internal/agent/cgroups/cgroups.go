// Package cgroups confines an instance's processes to one cgroup subtree (its cgroup root) and
// finds, kills and removes what is in it. It works on cgroup v1 (every hierarchy, including the
// named systemd one and the v2 "unified" hierarchy of the hybrid layout) and on a pure cgroup v2
// host. Paths given to it are cgroup paths such as "/herd-web-1", not file system paths.
package cgroups

import (
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

	"herd.dev/herd/internal/mountinfo"
)

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	// Mount is where it is mounted (e.g. /sys/fs/cgroup/cpu,cpuacct).
	Mount string
	// V2 is true for a cgroup2 mount.
	V2 bool
	// Controllers are the v1 controllers (or the name= of a named hierarchy) it carries.
	Controllers []string
}

// Has reports whether the hierarchy carries controller c (e.g. "cpuset", "name=systemd").
func (h Hierarchy) Has(c string) bool { return slices.Contains(h.Controllers, c) }

// Path returns the directory of cgroup path p in this hierarchy.
func (h Hierarchy) Path(p string) string {
	return filepath.Join(h.Mount, filepath.FromSlash(strings.TrimPrefix(p, "/")))
}

// Hierarchies returns the cgroup hierarchies mounted in this mount namespace, one per
// hierarchy (a hierarchy mounted twice is returned once), sorted by mount point.
func Hierarchies() ([]Hierarchy, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	hs := parseMountinfo(data)
	if len(hs) == 0 {
		return nil, errors.New("cgroups: no cgroup file system is mounted")
	}
	return hs, nil
}

// parseMountinfo extracts the cgroup hierarchies from the content of /proc/self/mountinfo.
func parseMountinfo(data []byte) []Hierarchy {
	seen := map[string]bool{}
	var out []Hierarchy
	for _, m := range mountinfo.Parse(data) {
		root, mount, fstype, superOpts := m.Root, m.Point, m.FSType, m.SuperOptions
		if root != "/" {
			continue // a bind mount of part of a hierarchy
		}
		var h Hierarchy
		switch fstype {
		case "cgroup2":
			h = Hierarchy{Mount: mount, V2: true}
		case "cgroup":
			h = Hierarchy{Mount: mount}
			for _, o := range strings.Split(superOpts, ",") {
				switch {
				case o == "rw" || o == "ro" || o == "noprefix" || o == "xattr" || o == "clone_children" ||
					o == "cpuset_v2_mode" || o == "nsdelegate" || strings.HasPrefix(o, "release_agent="):
				default:
					h.Controllers = append(h.Controllers, o)
				}
			}
		default:
			continue
		}
		key := fstype + ":" + strings.Join(h.Controllers, ",")
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Mount < out[j].Mount })
	return out
}

// Enter creates cgroup path p (e.g. "/herd-web-1/system") in every hierarchy and moves the
// calling process into it, so that every process it starts from then on is inside. For cpuset
// it copies cpuset.cpus and cpuset.mems down from the nearest ancestor that has them; on a v2
// hierarchy it enables the available controllers for the parents' children.
func Enter(hs []Hierarchy, p string) error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, h := range hs {
		if err := create(h, p); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(h.Path(p), "cgroup.procs"), pid, 0o644); err != nil {
			return fmt.Errorf("cgroups: moving the agent into %s: %w", h.Path(p), err)
		}
	}
	return nil
}

// create makes p and its missing parents in h.
func create(h Hierarchy, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := "/"
	for _, part := range parts {
		if part == "" {
			continue
		}
		parent := cur
		cur = filepath.Join(cur, part)
		dir := h.Path(cur)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroups: %w", err)
		}
		switch {
		case h.Has("cpuset"):
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if err := copyIfEmpty(filepath.Join(h.Path(parent), f), filepath.Join(dir, f)); err != nil {
					return err
				}
			}
		case h.V2:
			enableControllers(h.Path(parent))
		}
	}
	return nil
}

// copyIfEmpty writes src's content into dst when dst is empty (a new cpuset cgroup).
func copyIfEmpty(src, dst string) error {
	cur, err := os.ReadFile(dst)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if strings.TrimSpace(string(cur)) != "" {
		return nil
	}
	val, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if err := os.WriteFile(dst, val, 0o644); err != nil {
		return fmt.Errorf("cgroups: setting %s: %w", dst, err)
	}
	return nil
}

// enableControllers turns on, for the children of a v2 cgroup, every controller it has.
// Best effort: a controller that cannot be enabled is left off.
func enableControllers(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return
	}
	for _, c := range strings.Fields(string(data)) {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644)
	}
}

// procsHierarchy picks the hierarchy to enumerate processes in: v1 pids (or, failing that, the
// first v1 hierarchy with controllers), else the v2 one.
func procsHierarchy(hs []Hierarchy) (Hierarchy, bool) {
	for _, h := range hs {
		if h.Has("pids") {
			return h, true
		}
	}
	for _, h := range hs {
		if !h.V2 && len(h.Controllers) > 0 {
			return h, true
		}
	}
	for _, h := range hs {
		if h.V2 {
			return h, true
		}
	}
	return Hierarchy{}, false
}

// Procs returns the ids of every process in the subtree of cgroup path p.
func Procs(hs []Hierarchy, p string) []int {
	h, ok := procsHierarchy(hs)
	if !ok {
		return nil
	}
	var pids []int
	_ = filepath.WalkDir(h.Path(p), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// KillAll sends SIGKILL to every process in the subtree of p except those in keep, repeating
// until none is left or the timeout passes (processes may fork while being killed). It returns
// the number of processes still there.
func KillAll(hs []Hierarchy, p string, keep map[int]bool, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		left := 0
		for _, pid := range Procs(hs, p) {
			if keep[pid] {
				continue
			}
			left++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Remove removes cgroup path p and everything below it in every hierarchy, deepest first,
// skipping the cgroups in keep (cgroup paths, e.g. the one the caller is in, and its
// ancestors). Best effort: it returns the first error other than a missing cgroup.
func Remove(hs []Hierarchy, p string, keep map[string]bool) error {
	var first error
	for _, h := range hs {
		base := h.Path(p)
		var dirs []string
		_ = filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(d, h.Mount), "/")
			if keep[filepath.Clean(rel)] {
				continue
			}
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) && first == nil {
				first = fmt.Errorf("cgroups: removing %s: %w", d, err)
			}
		}
	}
	return first
}
