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
	path := filepath.Join(t.TempDir(), "containerd.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
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
	if len(evs) != len(want) {
		t.Fatalf("got %v, want %v", evs, want)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Errorf("event %d: got %v, want %v", i, evs[i], want[i])
		}
	}
}
