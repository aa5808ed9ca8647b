package etcd

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"herd.dev/herd/internal/store"
)

func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no endpoints", Config{}, "Endpoints is empty"},
		{"empty endpoint", Config{Endpoints: []string{"http://127.0.0.1:2379", " "}}, "Endpoints has an empty entry"},
		{"cert without key", Config{Endpoints: []string{"x"}, CertFile: "c.pem"}, "CertFile and KeyFile go together"},
		{"password without user", Config{Endpoints: []string{"x"}, Password: "p"}, "Username and Password go together"},
		{"prefix without slash", Config{Endpoints: []string{"x"}, Prefix: "/herd"}, `Prefix "/herd" must end with /`},
		{"unreadable CA", Config{Endpoints: []string{"x"}, CAFile: "/nonexistent/ca.pem"}, "TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(context.Background(), tt.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// TestTxnRefusedBeforeSending checks the bounds a Txn must keep: the store has no connection
// here, so an answer at all shows the Txn was refused before anything was sent.
func TestTxnRefusedBeforeSending(t *testing.T) {
	cfg := Config{Endpoints: []string{"unused"}, MaxTxnOps: 4, MaxRequestBytes: 1000}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	s := &Store{cfg: cfg}
	put := func(kind, name string, size int) store.Op {
		return store.Op{Type: store.OpPut, Kind: kind, Name: name, Value: []byte(strings.Repeat("x", size))}
	}
	var fiveKeys, sameKeyTwice []store.Op
	for i := range 5 {
		fiveKeys = append(fiveKeys, put("instance", "i"+strconv.Itoa(i), 1))
	}
	for range 5 {
		sameKeyTwice = append(sameKeyTwice, put("instance", "same", 1))
	}
	tests := []struct {
		name string
		ops  []store.Op
		want string
	}{
		{"too many keys", fiveKeys, "writes 5 keys, over etcd's limit of 4 per transaction (the server's --max-txn-ops)"},
		{"value too big", []store.Op{put("fleet", "small", 10), put("fleet", "big", 2000)}, "txn op 1 (put fleet/big): 2047 bytes, over etcd's request limit of 1000 bytes"},
		{"txn too big", []store.Op{put("fleet", "a", 400), put("fleet", "b", 400), put("fleet", "c", 400)}, "over etcd's request limit of 1000 bytes (the server's --max-request-bytes): write fewer at a time"},
		{"kind with a slash", []store.Op{put("fleet/x", "a", 1)}, "kind contains /"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Txn(context.Background(), tt.ops...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Txn error = %v, want one saying %q", err, tt.want)
			}
			if store.IsOpError(err) {
				t.Errorf("error %v wraps a write outcome; a request etcd would refuse is the caller's mistake", err)
			}
		})
	}
	// A fenced Txn carries one more compare and read, so it may write one key less.
	if _, err := s.Fenced("/herd/leader", 1).Txn(context.Background(), fiveKeys[:4]...); err == nil ||
		!strings.Contains(err.Error(), "writes 4 keys, over etcd's limit of 3 per transaction (the server's --max-txn-ops, less one for the leader's fence)") {
		t.Errorf("fenced Txn of 4 keys at a limit of 4: %v", err)
	}
	if got := store.MaxTxnOps(s.Fenced("/herd/leader", 1)); got != 3 {
		t.Errorf("MaxTxnOps of the fenced store = %d, want 3", got)
	}
	// Writes to one key count once: etcd gets one put per key.
	if plans, _, err := s.plan(sameKeyTwice); err != nil || len(plans) != 1 {
		t.Errorf("plan of 5 puts to one key = %d keys, %v; want 1 key", len(plans), err)
	}
}
