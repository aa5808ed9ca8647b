package v1alpha1

import (
	"strings"
	"testing"
)

func TestDiscoveryDefaults(t *testing.T) {
	served := &Fleet{Metadata: ObjectMeta{Name: "api"}, Spec: FleetSpec{Listeners: []Listener{{Port: 8081, InstancePort: 30080}}}}
	SetFleetDefaults(served, "local")
	if !served.Published() || served.Spec.Discovery.Name != "api" {
		t.Errorf("a fleet with a listener: discovery %+v, want enabled under its own name", *served.Spec.Discovery)
	}
	if w := DiscoveryWarning(&Fleet{Spec: FleetSpec{Listeners: served.Spec.Listeners}}, DefaultDiscoveryZone); w != "" {
		t.Errorf("warning for a fleet with a listener: %q", w)
	}

	written := &Fleet{Metadata: ObjectMeta{Name: "batch"}}
	unserved := *written
	SetFleetDefaults(&unserved, "local")
	if unserved.Published() {
		t.Error("a fleet without listeners is published")
	}
	if errs := validateDiscovery(&unserved.Spec); len(errs) > 0 {
		t.Errorf("defaulted discovery without listeners is refused: %v", errs)
	}
	if w := DiscoveryWarning(written, DefaultDiscoveryZone); w == "" {
		t.Error("no warning for a fleet that gets no name")
	}
	off := false
	if w := DiscoveryWarning(&Fleet{Spec: FleetSpec{Discovery: &Discovery{Enabled: &off}}}, DefaultDiscoveryZone); w != "" {
		t.Errorf("warning although enabled: false was written: %q", w)
	}
}

func TestDiscoveryAllows(t *testing.T) {
	var open *Discovery
	if !open.Allows("web") || !(&Discovery{}).Allows("web") {
		t.Error("no allowFrom must allow every fleet")
	}
	d := &Discovery{AllowFrom: []string{"web"}}
	if !d.Allows("web") || d.Allows("batch") || d.Allows("") {
		t.Errorf("allowFrom [web]: web %v, batch %v, unknown %v", d.Allows("web"), d.Allows("batch"), d.Allows(""))
	}
}

// The name alone reaches spec.discovery.port's listener, by default the first http listener
// without tls; a port that names no such listener is refused, naming the field and the fix.
func TestDiscoveryListener(t *testing.T) {
	tls := &ListenerTLS{LocalCA: true}
	listeners := []Listener{
		{Port: 5432, InstancePort: 30432, Protocol: ProtocolTCP},
		{Port: 8443, InstancePort: 30443, TLS: tls},
		{Port: 8081, InstancePort: 30080},
		{Port: 8082, InstancePort: 30081},
	}
	for _, tc := range []struct {
		port     int32
		want     int32
		refusal  string
		disabled bool
	}{
		{port: 0, want: 8081},
		{port: 8082, want: 8082},
		{port: 5432, refusal: "is tcp"},
		{port: 8443, refusal: "terminates TLS"},
		{port: 9999, refusal: "name one of spec.listeners[].port (5432, 8443, 8081, 8082)"},
		{port: 0, disabled: true},
	} {
		f := &Fleet{Metadata: ObjectMeta{Name: "api"}, Spec: FleetSpec{Listeners: listeners, Discovery: &Discovery{Port: tc.port}}}
		if tc.disabled {
			f.Spec.Discovery.Enabled = new(bool)
		}
		SetFleetDefaults(f, "local")
		errs := validateDiscovery(&f.Spec)
		if tc.refusal != "" {
			if len(errs) != 1 || errs[0].Field != "spec.discovery.port" || !strings.Contains(errs[0].Error(), tc.refusal) {
				t.Errorf("port %d: %v, want spec.discovery.port refused with %q", tc.port, errs, tc.refusal)
			}
			continue
		}
		l, ok := f.DiscoveryListener()
		if len(errs) > 0 || ok != (tc.want != 0) || l.Port != tc.want {
			t.Errorf("port %d (disabled %v): listener %d %v, errors %v; want %d", tc.port, tc.disabled, l.Port, ok, errs, tc.want)
		}
	}
	tcpOnly := &Fleet{Metadata: ObjectMeta{Name: "db"}, Spec: FleetSpec{Listeners: listeners[:1]}}
	SetFleetDefaults(tcpOnly, "local")
	if l, ok := tcpOnly.DiscoveryListener(); ok {
		t.Errorf("a fleet with a tcp listener only: the name alone reaches %+v, want none", l)
	}
}
