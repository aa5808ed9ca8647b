package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpRefusesBadStoreFlags checks that each wrong combination of --store and --etcd-* flags
// names the flag at fault and changes nothing: the data directory is not even created.
func TestUpRefusesBadStoreFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty-password")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"etcd without endpoints", []string{"--store", "etcd"}, "--store etcd needs --etcd-endpoints"},
		{"unknown store", []string{"--store", "zookeeper"}, `--store "zookeeper": use bolt`},
		{"etcd flags with bolt", []string{"--etcd-endpoints", "http://127.0.0.1:2379"}, "--etcd-endpoints only apply with --store etcd"},
		{"cert without key", []string{"--store", "etcd", "--etcd-endpoints", "https://127.0.0.1:2379", "--etcd-cert", "c.pem"}, "--etcd-cert and --etcd-key go together"},
		{"user without password", []string{"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-username", "herd"}, "--etcd-username and --etcd-password-file go together"},
		{"missing password file", []string{"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-username", "herd", "--etcd-password-file", filepath.Join(dir, "nope")}, "--etcd-password-file: open"},
		{"empty password file", []string{"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-username", "herd", "--etcd-password-file", empty}, "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := filepath.Join(dir, "data-"+strings.ReplaceAll(tt.name, " ", "-"))
			var out, errOut bytes.Buffer
			cmd := NewRootCmd(&out, &errOut)
			cmd.SetArgs(append([]string{"up", "--provider", "fake", "--listen", "127.0.0.1:0", "--data-dir", data}, tt.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("herd up %s: error = %v, want one saying %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("a refused herd up created its data directory %s", data)
			}
		})
	}
}
