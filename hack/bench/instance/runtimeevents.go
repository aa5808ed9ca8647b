// When containerd ran each pod's sandbox and started each container, from its log, for the boot
// timeline: the kubelet stamps its events to the second; containerd's log lines to the
// nanosecond.

package main

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"time"
)

// runtimeLine matches the containerd log lines of a sandbox's run and a container's start, each
// logged when asked and when it returns.
var runtimeLine = regexp.MustCompile(`^time="([^"]+)" level=info msg="(RunPodSandbox for &PodSandboxMetadata\{Name:([^,]+),|StartContainer for \\"([0-9a-f]{12}))`)

// runtimeEvents returns, from the containerd log at path, when each pod's sandbox was asked for
// and ready and each container's start asked for and done, counted from created.
func runtimeEvents(path string, created time.Time) ([]event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		m := runtimeLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		var name string
		switch {
		case m[3] != "" && strings.Contains(line, "returns sandbox id"):
			name = "sandbox of " + m[3] + " ready (containerd)"
		case m[3] != "":
			name = "sandbox of " + m[3] + " asked for (containerd)"
		case strings.Contains(line, "returns successfully"):
			name = "container " + m[4] + " started (containerd)"
		default:
			name = "container " + m[4] + " start asked for (containerd)"
		}
		evs = append(evs, event{at: at.Sub(created), name: name})
	}
	return evs, sc.Err()
}
