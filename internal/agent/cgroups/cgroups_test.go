package cgroups

import (
	"reflect"
	"testing"
)

const hybridMountinfo = `22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
25 22 0:23 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
28 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
29 25 0:27 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset,clone_children
30 25 0:28 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
31 25 0:28 /sub /mnt/pids-part rw,nosuid - cgroup cgroup rw,pids
32 25 0:26 / /mnt/cpu\040again rw,nosuid - cgroup cgroup rw,cpu,cpuacct
`

func TestParseMountinfoHybrid(t *testing.T) {
	got := parseMountinfo([]byte(hybridMountinfo))
	want := []Hierarchy{
		{Mount: "/sys/fs/cgroup/cpu,cpuacct", Controllers: []string{"cpu", "cpuacct"}},
		{Mount: "/sys/fs/cgroup/cpuset", Controllers: []string{"cpuset"}},
		{Mount: "/sys/fs/cgroup/pids", Controllers: []string{"pids"}},
		{Mount: "/sys/fs/cgroup/systemd", Controllers: []string{"name=systemd"}},
		{Mount: "/sys/fs/cgroup/unified", V2: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMountinfo:\n got %+v\nwant %+v", got, want)
	}
	h, ok := procsHierarchy(got)
	if !ok || h.Mount != "/sys/fs/cgroup/pids" {
		t.Errorf("procsHierarchy = %+v, %v; want the pids hierarchy", h, ok)
	}
	if p := got[0].Path("/herd-a/system"); p != "/sys/fs/cgroup/cpu,cpuacct/herd-a/system" {
		t.Errorf("Path = %q", p)
	}
}

func TestParseMountinfoPureV2(t *testing.T) {
	got := parseMountinfo([]byte("25 22 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"))
	want := []Hierarchy{{Mount: "/sys/fs/cgroup", V2: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if h, ok := procsHierarchy(got); !ok || !h.V2 {
		t.Errorf("procsHierarchy = %+v, %v", h, ok)
	}
}
