// Package mountinfo reads the kernel's mount table (/proc/self/mountinfo). The agent (to find the
// cgroup hierarchies), the local provider (to find cgroups and what is left mounted under an
// instance) and its leak checks all read it the same way.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Mount is one line of the mount table.
type Mount struct {
	// Root is the path within the file system that is mounted ("/" for the whole of it).
	Root string
	// Point is where it is mounted, unescaped.
	Point string
	// FSType is the file system type, e.g. "cgroup" or "overlay".
	FSType string
	// SuperOptions are the file system's own options, e.g. "rw,cpu,cpuacct" for a cgroup.
	SuperOptions string
}

// Read returns this process's mount table.
func Read() ([]Mount, error) { return ReadFile("/proc/self/mountinfo") }

// ReadFile returns the mount table in a mountinfo file.
func ReadFile(path string) ([]Mount, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	return Parse(data), nil
}

// Parse reads mountinfo content; lines it cannot read are skipped.
func Parse(data []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /root /point rw,noatime [optional fields...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) {
			continue
		}
		out = append(out, Mount{Root: fields[3], Point: Unescape(fields[4]), FSType: fields[sep+1], SuperOptions: fields[sep+3]})
	}
	return out
}

// CgroupPoints returns the mount points of the cgroup file systems among mounts (every v1
// hierarchy, the named systemd one, and the v2 one), sorted.
func CgroupPoints(mounts []Mount) []string {
	var out []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			out = append(out, m.Point)
		}
	}
	sort.Strings(out)
	return out
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
