// Pods' logs of an instance, tagged with the instance's identity: GET /v1/instances/NAME/logs
// reads them from the instance's API server (which has the kubelet read its pod log files, with
// follow, since and tail) with herd's own credentials, and streams them as JSON lines.

package apiserver

import (
	"bufio"
	"context"
	"encoding/json"

	"fmt"
	"math"
	"net/http"

	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// LogLine is one line of a container's log with where it comes from: GET
// /v1/instances/NAME/logs streams them, one JSON object per line, for people and log shippers.
type LogLine struct {
	Fleet     string    `json:"fleet"`
	Region    string    `json:"region"`
	Revision  string    `json:"revision"`
	Instance  string    `json:"instance"`
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	Container string    `json:"container"`
	Time      time.Time `json:"time"`
	Message   string    `json:"message"`
	// Error, when set, says why this container's log stopped early; the line has no Message.
	Error string `json:"error,omitempty"`
}

// LogQuery is what GET /v1/instances/NAME/logs takes, as query parameters of the same names.
type LogQuery struct {
	// Pod selects one pod, "name" or "namespace/name". Default: every pod outside kube-system.
	Pod string
	// Container selects one container of each pod. Default: all of them.
	Container string
	// Follow keeps streaming new lines until the client goes or the instance is deleted.
	Follow bool
	// Since keeps only lines newer than this. Default: 0, all.
	Since time.Duration
	// Tail keeps only the last N lines of each container. Default: -1, all.
	Tail int64
}

// Values encodes q as query parameters.
func (q LogQuery) Values() map[string][]string {
	v := map[string][]string{"pod": {q.Pod}, "container": {q.Container}, "tail": {strconv.FormatInt(q.Tail, 10)}}
	if q.Follow {
		v["follow"] = []string{"true"}
	}
	if q.Since > 0 {
		v["since"] = []string{q.Since.String()}
	}
	return v
}

// parseLogQuery reads a LogQuery from r, naming the flag of a bad parameter.
func parseLogQuery(r *http.Request) (LogQuery, error) {
	v := r.URL.Query()
	q := LogQuery{Pod: v.Get("pod"), Container: v.Get("container"), Follow: v.Get("follow") == "true", Tail: -1}
	if s := v.Get("since"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return q, fmt.Errorf("--since %q: want a positive duration such as 5m or 1h", s)
		}
		q.Since = d
	}
	if s := v.Get("tail"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < -1 {
			return q, fmt.Errorf("--tail %q: want a number of lines, or -1 for all", s)
		}
		q.Tail = n
	}
	return q, nil
}

// logStream is one container of one pod.
type logStream struct{ namespace, pod, container string }

// selectStreams picks the containers q asks for among pods, or says what there is instead.
func selectStreams(instance string, pods []corev1.Pod, q LogQuery) ([]logStream, error) {
	var chosen []corev1.Pod
	var names []string
	for _, p := range pods {
		full := p.Namespace + "/" + p.Name
		names = append(names, full)
		switch {
		case q.Pod == "" && p.Namespace != metav1.NamespaceSystem, q.Pod == p.Name, q.Pod == full:
			chosen = append(chosen, p)
		}
	}
	if q.Pod != "" && len(chosen) == 0 {
		return nil, fmt.Errorf("pod %q not found on instance %s; its pods: %s", q.Pod, instance, strings.Join(names, ", "))
	}
	var out []logStream
	var containers []string
	for _, p := range chosen {
		for _, c := range p.Spec.Containers {
			containers = append(containers, p.Name+"/"+c.Name)
			if q.Container == "" || q.Container == c.Name {
				out = append(out, logStream{namespace: p.Namespace, pod: p.Name, container: c.Name})
			}
		}
	}
	if q.Container != "" && len(out) == 0 {
		return nil, fmt.Errorf("container %q not found on instance %s; its containers (pod/container): %s", q.Container, instance, strings.Join(containers, ", "))
	}
	return out, nil
}

func (s *Server) instanceLogs(w http.ResponseWriter, r *http.Request) {
	q, err := parseLogQuery(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	in, core, pods, ok := s.instancePodList(w, r)
	if !ok {
		return
	}
	streams, err := selectStreams(in.Metadata.Name, pods, q)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// leaving is set once the instance is being deleted: its API server going away then ends a
	// follow cleanly instead of as an error.
	var leaving atomic.Bool
	if q.Follow {
		go s.watchLeaving(ctx, cancel, in, &leaving)
	}
	lines := make(chan LogLine, 256)
	var wg sync.WaitGroup
	for _, st := range streams {
		wg.Go(func() { readLog(ctx, core, in, st, q, &leaving, lines) })
	}
	go func() { wg.Wait(); close(lines) }()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flush(w)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for l := range lines {
		if enc.Encode(l) != nil {
			cancel() // the client went; the readers stop and close lines
			continue
		}
		if len(lines) == 0 {
			flush(w)
		}
	}
}

// watchLeaving sets leaving when the instance starts terminating and cancels the follow when it
// is deleted.
func (s *Server) watchLeaving(ctx context.Context, cancel context.CancelFunc, in *v1alpha1.Instance, leaving *atomic.Bool) {
	ch, err := s.opts.Store.Watch(ctx, store.Instances, in.Metadata.ResourceVersion)
	if err != nil {
		return
	}
	for ev := range ch {
		if ev.Record.Name != in.Metadata.Name {
			continue
		}
		if ev.Type == store.Deleted {
			leaving.Store(true)
			cancel()
			return
		}
		if cur, err := store.DecodeRecord[v1alpha1.Instance](ev.Record); err == nil && cur.Status.Phase == v1alpha1.PhaseTerminating {
			leaving.Store(true)
		}
	}
}

// readLog streams one container's log into lines until it ends or ctx does.
func readLog(ctx context.Context, core corev1client.CoreV1Interface, in *v1alpha1.Instance, st logStream, q LogQuery, leaving *atomic.Bool, lines chan<- LogLine) {
	base := LogLine{Fleet: in.Spec.Fleet, Region: in.Spec.Region, Revision: in.Spec.Revision, Instance: in.Metadata.Name,
		Namespace: st.namespace, Pod: st.pod, Container: st.container}
	send := func(l LogLine) bool {
		select {
		case lines <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	opts := &corev1.PodLogOptions{Container: st.container, Follow: q.Follow, Timestamps: true}
	if q.Since > 0 {
		secs := int64(math.Ceil(q.Since.Seconds()))
		opts.SinceSeconds = &secs
	}
	if q.Tail >= 0 {
		opts.TailLines = &q.Tail
	}
	rc, err := core.Pods(st.namespace).GetLogs(st.pod, opts).Stream(ctx)
	if err == nil {
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l := base
			l.Time, l.Message = splitTimestamp(sc.Text())
			if !send(l) {
				return
			}
		}
		err = sc.Err()
	}
	if err == nil || ctx.Err() != nil || leaving.Load() {
		return
	}
	l := base
	l.Error = err.Error()
	send(l)
}

// splitTimestamp splits a line the API server sent with timestamps=true into its time and message.
func splitTimestamp(line string) (time.Time, string) {
	ts, msg, ok := strings.Cut(line, " ")
	if !ok {
		return time.Time{}, line
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return time.Time{}, line
	}
	return t, msg
}
