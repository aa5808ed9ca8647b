package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestRuntimeEvents(t *testing.T) {
	log := `time="2026-11-29T19:11:15.295506448Z" level=info msg="ImageCreate event &ImageCreate{Name:sha256:c7ee}"
time="2026-11-29T19:11:17.270932947Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:hello-544b8fbcdb-v747r,Uid:cfbc,Namespace:default,Attempt:0,}"
time="2026-11-29T19:11:17.775161612Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:hello-544b8fbcdb-v747r,Uid:cfbc,Namespace:default,Attempt:0,} returns sandbox id \"d546ea7edd3a\""
time="2026-11-29T19:11:17.819614531Z" level=info msg="StartContainer for \"e1d47294cf87968b7daa0a40\""
time="2026-11-29T19:11:18.028602288Z" level=info msg="StartContainer for \"e1d47294cf87968b7daa0a40\" returns successfully"
`
	evs := logEventsOf(t, runtimeEvents, log, time.Date(2026, 11, 29, 19, 11, 15, 0, time.UTC))
	want := []event{
		{2270932947, "sandbox of hello-544b8fbcdb-v747r asked for (containerd)"},
		{2775161612, "sandbox of hello-544b8fbcdb-v747r ready (containerd)"},
		{2819614531, "container e1d47294cf87 start asked for (containerd)"},
		{3028602288, "container e1d47294cf87 started (containerd)"},
	}
	sameEvents(t, evs, want)
}

func TestNodeEvents(t *testing.T) {
	log := `I1129 22:34:09.493982   27319 server.go:1289] "Started kubelet"
I1129 22:34:09.720165   27319 kubelet_node_status.go:75] "Attempting to register node" node="bench-26974-1"
I1129 22:34:09.726494   27319 kubelet_node_status.go:78] "Successfully registered node" node="bench-26974-1"
I1129 22:34:09.754160   27319 main.go:232] "The node is registered; starting the components that wait for it" node="bench-26974-1"
E1129 22:34:09.760000   27319 main.go:232] "Started kubelet twice" (not a line the bench reads)
I1129 22:34:09.772304   27319 kubelet_node_status.go:501] "Fast updating node status as it just became ready"
I1129 22:34:09.901000   27319 shared_informer.go:358] "Caches are synced" controller="endpoint slice config"
I1129 22:34:09.902000   27319 shared_informer.go:358] "Caches are synced" controller="service config"
`
	evs := logEventsOf(t, nodeEvents, log, time.Date(2026, 11, 29, 22, 34, 7, 677000000, time.UTC))
	want := []event{
		{1816982000, "kubelet started"},
		{2049494000, "node registered (kubelet)"},
		{2077160000, "kube-scheduler and kube-proxy started"},
		{2095304000, "node Ready sent (kubelet)"},
		{2225000000, "kube-proxy's Services synced"},
	}
	sameEvents(t, evs, want)

	// Across a new year, klog's stamp (no year) belongs to the next year.
	evs = logEventsOf(t, nodeEvents, `I0101 00:00:01.000000   1 server.go:1289] "Started kubelet"`+"\n",
		time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC))
	sameEvents(t, evs, []event{{2 * time.Second, "kubelet started"}})
}

// logEventsOf returns what read (runtimeEvents, nodeEvents) finds in a log file holding text,
// counted from created.
func logEventsOf(t *testing.T, read func(path string, created time.Time) ([]event, error), text string, created time.Time) []event {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := read(path, created)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// sameEvents fails t unless got holds the events of want, in order.
func sameEvents(t *testing.T, got, want []event) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
