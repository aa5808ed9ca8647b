package statefile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteJSONThenReadJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	var v struct{ Name string }
	if found, err := ReadJSON(path, &v); err != nil || found {
		t.Fatalf("ReadJSON of a missing file = %v, %v; want not found and no error", found, err)
	}
	if err := WriteJSON(path, struct{ Name string }{"eu"}); err != nil {
		t.Fatal(err)
	}
	if found, err := ReadJSON(path, &v); err != nil || !found || v.Name != "eu" {
		t.Fatalf("ReadJSON = %v, %v, %+v; want found eu", found, err, v)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(path, &v); err == nil {
		t.Fatal("ReadJSON of a torn file: no error")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("%d files in the directory, want the state file alone (no temporary file left)", len(entries))
	}
}
