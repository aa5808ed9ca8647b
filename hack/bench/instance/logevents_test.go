package main

import (
	"os"
	"path/filepath"
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
	path := writeLog(t, "containerd.log", log)
	created := time.Date(2026, 11, 29, 19, 11, 15, 0, time.UTC)
	evs, err := runtimeEvents(path, created)
	if err != nil {
		t.Fatal(err)
	}
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
I1129 22:34:09.754160   27319 main.go:232] "The node is registered; starting kube-scheduler" node="bench-26974-1"
E1129 22:34:09.760000   27319 main.go:232] "Started kubelet twice" (not a line the bench reads)
I1129 22:34:09.772304   27319 kubelet_node_status.go:501] "Fast updating node status as it just became ready"
`
	path := writeLog(t, "kube-combined.log", log)
	created := time.Date(2026, 11, 29, 22, 34, 7, 677000000, time.UTC)
	evs, err := nodeEvents(path, created)
	if err != nil {
		t.Fatal(err)
	}
	want := []event{
		{1816982000, "kubelet started"},
		{2049494000, "node registered (kubelet)"},
		{2077160000, "kube-scheduler started"},
		{2095304000, "node Ready sent (kubelet)"},
	}
	sameEvents(t, evs, want)

	// Across a new year, klog's stamp (no year) belongs to the next year.
	newYear := time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC)
	evs, err = nodeEvents(writeLog(t, "kube-combined.log", `I0101 00:00:01.000000   1 server.go:1289] "Started kubelet"`+"\n"), newYear)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].at != 2*time.Second {
		t.Errorf("across a new year: got %v, want one event 2 s after", evs)
	}
}

// writeLog writes a log file named name holding text into a new directory and returns its path.
func writeLog(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sameEvents fails t unless got holds the events of want, in order.
func sameEvents(t *testing.T, got, want []event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: got %v, want %v", i, got[i], want[i])
		}
	}
}
