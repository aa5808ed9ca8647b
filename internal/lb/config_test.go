package lb

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*-*.*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ParseConfig(data)
			if err == nil {
				err = cfg.WithDefaults().Validate()
			}
			if strings.HasPrefix(filepath.Base(f), "valid-") {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want an error, got none")
			}
			// The first "# error:" line of an invalid file is the text the error must contain.
			for _, line := range strings.Split(string(data), "\n") {
				if want, ok := strings.CutPrefix(line, "# error: "); ok && !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	cfg := Config{Listeners: []Listener{{Name: "a", Fleet: "f", Address: ":80", Groups: []TargetGroup{{Name: "g", Targets: []Target{{ID: "t", Address: "h:1"}}}}}}}
	l := cfg.WithDefaults().Listeners[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"protocol", l.Protocol, ProtocolHTTP},
		{"backend", l.BackendProtocol, BackendHTTP1},
		{"policy", l.Policy.Type, PolicyLeastOutstanding},
		{"interval", l.HealthCheck.Interval.D(), time.Second},
		{"check timeout", l.HealthCheck.Timeout.D(), time.Second},
		{"healthy threshold", l.HealthCheck.HealthyThreshold, 2},
		{"drain", l.DrainTimeout.D(), 30 * time.Second},
		{"retry budget", l.Retry.Budget, 0.2},
		{"read header", l.Timeouts.ReadHeader.D(), 10 * time.Second},
		{"max headers", l.Limits.MaxHeaders, 100},
		{"target weight", l.Groups[0].Targets[0].Weight, 1},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Fatalf("got %v, want %v", c.got, c.want)
			}
		})
	}
	// A short interval pulls the check timeout down with it.
	cfg.Listeners[0].HealthCheck.Interval = Duration(200 * time.Millisecond)
	if got := cfg.WithDefaults().Listeners[0].HealthCheck.Timeout.D(); got != 200*time.Millisecond {
		t.Fatalf("timeout with a 200ms interval = %s", got)
	}
	// WithDefaults copies: the caller's slices are not shared.
	d := cfg.WithDefaults()
	d.Listeners[0].Groups[0].Targets[0].ID = "changed"
	if cfg.Listeners[0].Groups[0].Targets[0].ID != "t" {
		t.Fatal("WithDefaults shares target slices with its input")
	}
}

func TestValidate(t *testing.T) {
	base := func() Listener {
		return Listener{Name: "web/http", Fleet: "web", Address: "127.0.0.1:8080",
			Groups: []TargetGroup{{Name: "r1", Targets: []Target{{ID: "a", Address: "127.0.0.1:9000"}}}}}
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no name", func(c *Config) { c.Listeners[0].Name = "" }, "listeners[0].name: required"},
		{"no fleet", func(c *Config) { c.Listeners[0].Fleet = "" }, "listeners[0].fleet: required"},
		{"bad address", func(c *Config) { c.Listeners[0].Address = "8080" }, "listeners[0].address"},
		{"bad protocol", func(c *Config) { c.Listeners[0].Protocol = "udp" }, "listeners[0].protocol"},
		{"tls without key", func(c *Config) { c.Listeners[0].TLS = &TLS{CertFile: "c.pem"} }, "listeners[0].tls"},
		{"sticky on tcp", func(c *Config) {
			c.Listeners[0].Protocol = ProtocolTCP
			c.Listeners[0].Policy.Type = PolicyStickyCookie
		}, "listeners[0].policy.type: sticky-cookie needs an HTTP listener"},
		{"unknown policy", func(c *Config) { c.Listeners[0].Policy.Type = "random" }, "listeners[0].policy.type"},
		{"unknown group policy", func(c *Config) { c.Listeners[0].GroupPolicy = "closest" }, `listeners[0].groupPolicy: "closest" is not one of weighted, nearest`},
		{"timeout over interval", func(c *Config) {
			c.Listeners[0].HealthCheck.Interval = Duration(time.Second)
			c.Listeners[0].HealthCheck.Timeout = Duration(2 * time.Second)
		}, "listeners[0].healthCheck.timeout"},
		{"relative health path", func(c *Config) { c.Listeners[0].HealthCheck.Path = "healthz" }, "healthCheck.path"},
		{"budget over 1", func(c *Config) { c.Listeners[0].Retry.Budget = 2 }, "listeners[0].retry.budget"},
		{"negative weight", func(c *Config) { c.Listeners[0].Groups[0].Weight = -1 }, "listeners[0].groups[0].weight"},
		{"duplicate group", func(c *Config) {
			c.Listeners[0].Groups = append(c.Listeners[0].Groups, TargetGroup{Name: "r1"})
		}, "listeners[0].groups[1].name"},
		{"target without port", func(c *Config) { c.Listeners[0].Groups[0].Targets[0].Address = "127.0.0.1" }, "targets[0].address"},
		{"target port 0", func(c *Config) { c.Listeners[0].Groups[0].Targets[0].Address = "127.0.0.1:0" }, "targets[0].address"},
		{"duplicate listener name", func(c *Config) {
			l := base()
			l.Address = "127.0.0.1:8081"
			c.Listeners = append(c.Listeners, l)
		}, "listeners[1].name"},
		{"duplicate address", func(c *Config) {
			l := base()
			l.Name = "other"
			c.Listeners = append(c.Listeners, l)
		}, "listeners[1].address"},
		{"two port-0 listeners", func(c *Config) {
			c.Listeners[0].Address = "127.0.0.1:0"
			l := base()
			l.Name, l.Address = "other", "127.0.0.1:0"
			c.Listeners = append(c.Listeners, l)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Listeners: []Listener{base()}}
			tc.mutate(&cfg)
			err := cfg.WithDefaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("want error containing %q, got none", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := d.UnmarshalJSON([]byte(`"1m30s"`)); err != nil || d.D() != 90*time.Second {
		t.Fatalf("got %v, %v", d, err)
	}
	if err := d.UnmarshalJSON([]byte(`5`)); err == nil {
		t.Fatal("a bare number must be rejected: its unit would be a guess")
	}
	b, _ := Duration(1500 * time.Millisecond).MarshalJSON()
	if string(b) != `"1.5s"` {
		t.Fatalf("marshal: %s", b)
	}
}
