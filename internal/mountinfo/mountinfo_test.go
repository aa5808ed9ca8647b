package mountinfo

import "testing"

func TestParse(t *testing.T) {
	data := []byte(`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
35 25 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:14 - cgroup cgroup rw,cpu,cpuacct
40 22 0:45 /sub /mnt/my\040dir rw master:2 - tmpfs tmpfs rw
short line
`)
	got := Parse(data)
	want := []Mount{
		{Root: "/", Point: "/", FSType: "ext4", SuperOptions: "rw"},
		{Root: "/", Point: "/sys/fs/cgroup/cpu,cpuacct", FSType: "cgroup", SuperOptions: "rw,cpu,cpuacct"},
		{Root: "/sub", Point: "/mnt/my dir", FSType: "tmpfs", SuperOptions: "rw"},
	}
	if len(got) != len(want) {
		t.Fatalf("Parse = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if cg := CgroupPoints(got); len(cg) != 1 || cg[0] != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("CgroupPoints = %q, want the one cgroup mount", cg)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/tail\`: `/tail\`, `/x\134y`: `/x\y`} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
