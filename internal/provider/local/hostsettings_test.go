package local

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"herd.dev/herd/internal/provider/local/localtest"
)

// hostOriginals are a host's values before any kubelet ran (Debian's defaults, and the keys
// limits the kernel already has).
var hostOriginals = map[string]string{
	"vm.overcommit_memory":      "0",
	"vm.panic_on_oom":           "0",
	"kernel.panic":              "0",
	"kernel.panic_on_oops":      "0",
	"kernel.keys.root_maxkeys":  "1000000",
	"kernel.keys.root_maxbytes": "25000000",
}

// fakeSysctls returns a directory laid out as /proc/sys holding values.
func fakeSysctls(t *testing.T, values map[string]string) string {
	t.Helper()
	root := t.TempDir()
	setSysctls(t, root, values)
	return root
}

func setSysctls(t *testing.T, root string, values map[string]string) {
	t.Helper()
	for name, v := range values {
		p := filepath.Join(root, strings.ReplaceAll(name, ".", "/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// kubeletStarts does to root what an instance's kubelet does to /proc/sys.
func kubeletStarts(t *testing.T, root string) {
	t.Helper()
	v := map[string]string{}
	for _, s := range KubeletHostSettings {
		v[s.Name] = s.Value
	}
	setSysctls(t, root, v)
}

func readSysctls(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range KubeletHostSettings {
		if b, err := os.ReadFile(filepath.Join(root, strings.ReplaceAll(s.Name, ".", "/"))); err == nil {
			out[s.Name] = strings.TrimSpace(string(b))
		}
	}
	return out
}

func assertSysctls(t *testing.T, root string, want map[string]string) {
	t.Helper()
	got := readSysctls(t, root)
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %q, want %q", name, got[name], w)
		}
	}
}

// hostSettingsProvider is a provider on a fresh data directory whose kernel settings live in root,
// logging into log.
func hostSettingsProvider(t *testing.T, dataDir, root string, log *bytes.Buffer) *Provider {
	t.Helper()
	opts := Options{DataDir: dataDir, HerdBinary: "/bin/true", SysctlRoot: root}
	if log != nil {
		opts.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// addInstance writes the record of an instance called name, as Create does before it records the
// host's settings.
func addInstance(t *testing.T, p *Provider, name string) {
	t.Helper()
	dir := p.InstanceDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(dir, &record{ID: "local-" + name, Phase: phaseCreated}); err != nil {
		t.Fatal(err)
	}
	if err := p.withProviderLock(p.recordHostSettings); err != nil {
		t.Fatalf("record the host settings: %v", err)
	}
}

// removeInstance removes the instance's directory and does what destroy does after it.
func removeInstance(t *testing.T, p *Provider, name string) {
	t.Helper()
	if err := os.RemoveAll(p.InstanceDir(name)); err != nil {
		t.Fatal(err)
	}
	if err := p.withProviderLock(p.restoreHostSettings); err != nil {
		t.Fatalf("restore the host settings: %v", err)
	}
}

func TestHostSettingsRecordedBeforeTheFirstInstanceAndRestoredAfterTheLast(t *testing.T) {
	root := fakeSysctls(t, hostOriginals)
	data := t.TempDir()
	p := hostSettingsProvider(t, data, root, nil)
	saved := filepath.Join(p.dir, hostSettingsFile)

	addInstance(t, p, "a")
	fi, err := os.Stat(saved)
	if err != nil {
		t.Fatalf("no record of the host's settings after the first instance: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", saved, fi.Mode().Perm())
	}
	var s savedSettings
	if b, err := os.ReadFile(saved); err != nil || json.Unmarshal(b, &s) != nil {
		t.Fatalf("read %s: %v", saved, err)
	}
	for name, v := range hostOriginals {
		if s.Original[name] != v {
			t.Errorf("recorded %s = %q, want %q", name, s.Original[name], v)
		}
	}

	// The kubelets run; a second instance and a restarted herd up keep the first record.
	kubeletStarts(t, root)
	addInstance(t, p, "b")
	p = hostSettingsProvider(t, data, root, nil)
	changes, err := p.HostChanges()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.Current != c.Value || c.Original != hostOriginals[c.Name] {
			t.Errorf("HostChanges: %s now %q (want %q), original %q (want %q)", c.Name, c.Current, c.Value, c.Original, hostOriginals[c.Name])
		}
	}

	removeInstance(t, p, "a")
	assertSysctls(t, root, map[string]string{"kernel.panic": "10", "vm.overcommit_memory": "1"})
	if _, err := os.Stat(saved); err != nil {
		t.Errorf("the record went while an instance remains: %v", err)
	}
	removeInstance(t, p, "b")
	assertSysctls(t, root, hostOriginals)
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("the record is still there after the restore: %v", err)
	}

	// The next first instance records afresh.
	setSysctls(t, root, map[string]string{"kernel.panic": "5"})
	addInstance(t, p, "c")
	kubeletStarts(t, root)
	removeInstance(t, p, "c")
	assertSysctls(t, root, map[string]string{"kernel.panic": "5"})
}

func TestHostSettingsRestore(t *testing.T) {
	cases := []struct {
		name string
		// after the kubelet ran and before the last instance goes
		meanwhile map[string]string
		crash     bool // the process died between removing the last instance and the restore
		want      map[string]string
	}{
		{name: "after the last delete", want: hostOriginals},
		{name: "by the next herd up after a crash", crash: true, want: hostOriginals},
		{
			name:      "leaves a value someone set since",
			meanwhile: map[string]string{"kernel.panic": "30"},
			want:      map[string]string{"kernel.panic": "30", "kernel.panic_on_oops": "0", "vm.overcommit_memory": "0"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSysctls(t, hostOriginals)
			data := t.TempDir()
			p := hostSettingsProvider(t, data, root, nil)
			addInstance(t, p, "a")
			kubeletStarts(t, root)
			setSysctls(t, root, tc.meanwhile)
			if tc.crash {
				if err := os.RemoveAll(p.InstanceDir("a")); err != nil {
					t.Fatal(err)
				}
				hostSettingsProvider(t, data, root, nil)
			} else {
				removeInstance(t, p, "a")
			}
			assertSysctls(t, root, tc.want)
		})
	}
}

func TestHostSettingsSkipWhatTheKernelLacks(t *testing.T) {
	orig := map[string]string{"kernel.panic": "0", "vm.overcommit_memory": "0"}
	root := fakeSysctls(t, orig)
	p := hostSettingsProvider(t, t.TempDir(), root, nil)
	addInstance(t, p, "a")
	setSysctls(t, root, map[string]string{"kernel.panic": "10", "vm.overcommit_memory": "1"})
	removeInstance(t, p, "a")
	assertSysctls(t, root, orig)
	if got := readSysctls(t, root); len(got) != len(orig) {
		t.Errorf("the restore wrote settings the kernel lacks: %v", got)
	}
}

// The leak checks of real-instance tests compare the same settings before and after.
func TestLeakChecksCoverTheKubeletSettings(t *testing.T) {
	var names []string
	for _, s := range KubeletHostSettings {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, localtest.KernelSettings) {
		t.Errorf("localtest.KernelSettings = %v, want the kubelet's %v", localtest.KernelSettings, names)
	}
}

func TestAnnounceHostChangesNamesEachSetting(t *testing.T) {
	var log bytes.Buffer
	p := hostSettingsProvider(t, t.TempDir(), fakeSysctls(t, hostOriginals), &log)
	p.AnnounceHostChanges()
	out := log.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=WARN") {
		t.Fatalf("want one warning line, got:\n%s", out)
	}
	for _, s := range KubeletHostSettings {
		want := s.Name + "=\"" + hostOriginals[s.Name] + " -> " + s.Value + "\""
		if !strings.Contains(out, want) {
			t.Errorf("the announcement lacks %s:\n%s", want, out)
		}
	}
}
