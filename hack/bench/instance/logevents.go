// Boot timeline events from the components' own logs, whose lines are stamped to the
// microsecond or finer, where the kubelet's events are stamped to the second: when containerd ran
// each pod's sandbox and started each container, and when the kubelet started, registered its
// node and reported it Ready.

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
	return logEvents(path, func(line string) (event, bool) {
		m := runtimeLine.FindStringSubmatch(line)
		if m == nil {
			return event{}, false
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return event{}, false
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
		return event{at: at.Sub(created), name: name}, true
	})
}

// nodeLine matches kube-combined's log lines (klog's format: month and day, then the local
// time) of the kubelet's start, its node's registration and first Ready status, the start of
// kube-scheduler and kube-proxy, which wait for the registration, and kube-proxy's informer of
// Services synced (its first rules follow once its informer of EndpointSlices is, which usually
// syncs first).
var nodeLine = regexp.MustCompile(`^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+\] "(Started kubelet|Successfully registered node|Fast updating node status as it just became ready|The node is registered; starting the components that wait for it|Caches are synced" controller="service config)"`)

// nodeEventNames name the events of nodeLine's messages.
var nodeEventNames = map[string]string{
	"Started kubelet":                                                  "kubelet started",
	"Successfully registered node":                                     "node registered (kubelet)",
	"Fast updating node status as it just became ready":                "node Ready sent (kubelet)",
	"The node is registered; starting the components that wait for it": "kube-scheduler and kube-proxy started",
	`Caches are synced" controller="service config`:                    "kube-proxy's Services synced",
}

// nodeEvents returns, from the kube-combined log at path, when the kubelet started, registered
// its node and sent its first Ready status, when kube-scheduler and kube-proxy started, and when
// kube-proxy's Services were synced, counted from created.
func nodeEvents(path string, created time.Time) ([]event, error) {
	return logEvents(path, func(line string) (event, bool) {
		m := nodeLine.FindStringSubmatch(line)
		if m == nil {
			return event{}, false
		}
		stamp, err := time.ParseInLocation("0102 15:04:05.000000", m[1], created.Location())
		if err != nil {
			return event{}, false
		}
		// klog's stamp has no year: the boot's, or the next one's across a new year.
		at := stamp.AddDate(created.Year()-stamp.Year(), 0, 0)
		if at.Before(created.Add(-24 * time.Hour)) {
			at = at.AddDate(1, 0, 0)
		}
		return event{at: at.Sub(created), name: nodeEventNames[m[2]]}, true
	})
}

// logEvents returns the events parse finds in the lines of the log at path.
func logEvents(path string, parse func(line string) (event, bool)) ([]event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if e, ok := parse(sc.Text()); ok {
			evs = append(evs, e)
		}
	}
	return evs, sc.Err()
}
