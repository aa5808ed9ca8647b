package v1alpha1

import "testing"

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
