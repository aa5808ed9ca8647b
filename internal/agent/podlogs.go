// The last lines of a crashing container's log, for the reason an instance gives when its
// workload never becomes ready: "CrashLoopBackOff" alone does not say why a program exits.

package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Bounds of a log excerpt in a reason: the reason travels into the fleet's events and status.
const (
	logTailLines    = 3
	logTailLineSize = 160
)

// podLogs reads containers' logs from the cluster's API server (which has the kubelet read them).
type podLogs struct {
	client *http.Client
	host   string
}

func newPodLogs(rc *rest.Config) (*podLogs, error) {
	c, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	return &podLogs{client: c, host: strings.TrimRight(rc.Host, "/")}, nil
}

// tail returns the last lines of a container's log (of its previous run with previous), quoted
// and joined, or "" when there are none or they cannot be read within a second.
func (l *podLogs) tail(ctx context.Context, namespace, pod, container string, previous bool) string {
	if l == nil {
		return ""
	}
	q := url.Values{"container": {container}, "tailLines": {fmt.Sprint(logTailLines)}, "limitBytes": {"4096"}}
	if previous {
		q.Set("previous", "true")
	}
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/log?%s", l.host, url.PathEscape(namespace), url.PathEscape(pod), q.Encode())
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ""
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4096))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if len(line) > logTailLineSize {
			line = line[:logTailLineSize] + "..."
		}
		lines = append(lines, fmt.Sprintf("%q", line))
	}
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, " ")
}
