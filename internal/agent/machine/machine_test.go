package machine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseUserData(t *testing.T) {
	for _, tc := range []struct {
		in, name, wantErr string
	}{
		{in: ""},
		{in: "#herd\nname: web-1\nreadyTimeout: 10m\n", name: "web-1"},
		{in: "#cloud-config\nname: web-2\n", name: "web-2"},
		{in: "name: Web_1\n", wantErr: `name "Web_1": want a DNS label`},
		{in: "readyTimeout: soon\n", wantErr: `readyTimeout "soon"`},
		{in: "nmae: web-1\n", wantErr: `unknown field "nmae"`},
	} {
		ud, err := ParseUserData([]byte(tc.in))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseUserData(%q) = %v, want an error with %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseUserData(%q): %v", tc.in, err)
		case tc.wantErr == "" && ud.Name != tc.name:
			t.Errorf("ParseUserData(%q).Name = %q, want %q", tc.in, ud.Name, tc.name)
		}
	}
}

func TestNameFrom(t *testing.T) {
	for in, want := range map[string]string{
		"i-0123456789abcdef0":          "i-0123456789abcdef0",
		"Web_1.example.internal":       "web-1",
		"--":                           "",
		strings.Repeat("a", 70) + ".x": strings.Repeat("a", 63),
	} {
		if got := nameFrom(in); got != want {
			t.Errorf("nameFrom(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadSeedDir(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "user-data"), "#herd\nname: from-user-data\n")
	write(t, filepath.Join(dir, "meta-data"), "instance-id: iid-1\nlocal-hostname: node-7\n")
	sd, err := readSeedDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sd.hostname != "node-7" || !strings.Contains(string(sd.userData), "from-user-data") || sd.source != "nocloud" {
		t.Errorf("seed = %+v", sd)
	}
}

// fakeIMDS answers as EC2's IMDSv2 does: a token from PUT, and the metadata only with it.
func fakeIMDS(t *testing.T, userData string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
				http.Error(w, "ttl missing", http.StatusBadRequest)
				return
			}
			w.Write([]byte("tok"))
		case r.Header.Get("X-aws-ec2-metadata-token") != "tok":
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		case r.URL.Path == "/latest/user-data" && userData != "":
			w.Write([]byte(userData))
		case r.URL.Path == "/latest/meta-data/instance-id":
			w.Write([]byte("i-0abc"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestDiscoverIMDS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := fakeIMDS(t, "name: from-imds\nreadyTimeout: 7m\n")
	id, err := Discover(ctx, Sources{ByLabel: t.TempDir(), IMDS: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "from-imds" || id.ReadyTimeout != 7*time.Minute || id.Source != "imds" || !id.Address.Is4() {
		t.Errorf("identity = %+v", id)
	}

	// No user data: the instance id names it.
	id, err = Discover(ctx, Sources{ByLabel: t.TempDir(), IMDS: fakeIMDS(t, "").URL})
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "i-0abc" {
		t.Errorf("name without user data = %q, want the instance id", id.Name)
	}
}

func TestDiscoverStandalone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mid := filepath.Join(t.TempDir(), "machine-id")
	write(t, mid, "0123456789abcdef0123456789abcdef\n")
	id, err := Discover(ctx, Sources{ByLabel: t.TempDir(), IMDS: "off", MachineID: mid})
	if err != nil {
		t.Fatal(err)
	}
	if id.Name != "herd-0123456789ab" || id.Source != "none" {
		t.Errorf("identity = %+v", id)
	}
}

func TestDiscoverBadUserData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Discover(ctx, Sources{ByLabel: t.TempDir(), IMDS: fakeIMDS(t, "name: NOT_A_LABEL\n").URL})
	if err == nil || !strings.Contains(err.Error(), "user data from imds: name") {
		t.Fatalf("Discover = %v, want an error naming the user data's name", err)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
