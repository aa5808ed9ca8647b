package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"herd.dev/herd/internal/statefile"
)

// The kubelet of every instance sets a few kernel settings when it starts (setupKernelTunables in
// its container manager). /proc/sys/kernel and /proc/sys/vm are not namespaced, so they change the
// whole host, not the instance. The kubelet's protectKernelDefaults does not avoid that: with it
// the kubelet refuses to start unless the host already has these values. So the provider records
// the host's values before its first instance starts, says what will change (AnnounceHostChanges)
// and puts them back when its last instance is deleted.

// HostSetting is a host kernel setting every local instance sets.
type HostSetting struct {
	// Name is the sysctl name, e.g. "kernel.panic".
	Name string
	// Value is what the instances' kubelets set.
	Value string
}

// KubeletHostSettings are the settings the kubelet (v1.33) sets on the host, with its values
// (k8s.io/component-helpers/node/util/sysctl).
var KubeletHostSettings = []HostSetting{
	{Name: "vm.overcommit_memory", Value: "1"},
	{Name: "vm.panic_on_oom", Value: "0"},
	{Name: "kernel.panic", Value: "10"},
	{Name: "kernel.panic_on_oops", Value: "1"},
	{Name: "kernel.keys.root_maxkeys", Value: "1000000"},
	{Name: "kernel.keys.root_maxbytes", Value: "25000000"},
}

// DefaultSysctlRoot is where kernel settings are read and written.
const DefaultSysctlRoot = "/proc/sys"

// hostSettingsFile, in the provider's directory, holds the host's values from before the first
// instance started, for as long as any instance exists.
const hostSettingsFile = "host-settings.json"

// HostChange is one host setting as the host has it now.
type HostChange struct {
	HostSetting
	// Current is the host's value now.
	Current string
	// Original is the value recorded before the first instance started, "" when none is recorded
	// (no instance exists).
	Original string
}

// savedSettings is host-settings.json.
type savedSettings struct {
	RecordedAt time.Time `json:"recordedAt"`
	// Original maps a setting's name to the host's value before the first instance started.
	Original map[string]string `json:"original"`
}

func (p *Provider) sysctlPath(name string) string {
	return filepath.Join(p.opts.SysctlRoot, strings.ReplaceAll(name, ".", "/"))
}

// readSysctl returns a setting's value, "" (and no error) when this kernel has no such setting.
func (p *Provider) readSysctl(name string) (string, error) {
	b, err := os.ReadFile(p.sysctlPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (p *Provider) writeSysctl(name, value string) error {
	if err := os.WriteFile(p.sysctlPath(name), []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("set %s=%s: %w", name, value, err)
	}
	return nil
}

func (p *Provider) readSaved() (*savedSettings, error) {
	path := filepath.Join(p.dir, hostSettingsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var s savedSettings
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w (the host's kernel settings from before herd's instances are lost: see docs/host-settings.md to restore them by hand, then remove the file)", path, err)
	}
	return &s, nil
}

// HostChanges returns each setting local instances set, with the host's value now and the one
// recorded before the first instance started.
func (p *Provider) HostChanges() ([]HostChange, error) {
	saved, err := p.readSaved()
	if err != nil {
		return nil, err
	}
	var out []HostChange
	for _, s := range KubeletHostSettings {
		cur, err := p.readSysctl(s.Name)
		if err != nil {
			return nil, err
		}
		if cur == "" {
			continue
		}
		c := HostChange{HostSetting: s, Current: cur}
		if saved != nil {
			c.Original = saved.Original[s.Name]
		}
		out = append(out, c)
	}
	return out, nil
}

// AnnounceHostChanges logs, once, which host kernel settings local instances set: each with the
// host's value now and the instances' value (and the recorded original while instances exist).
func (p *Provider) AnnounceHostChanges() {
	changes, err := p.HostChanges()
	if err != nil {
		p.log.Warn("local instances set host kernel settings, and reading them failed", "err", err)
		return
	}
	var attrs []any
	for _, c := range changes {
		v := c.Current + " -> " + c.Value
		if c.Original != "" && c.Original != c.Current {
			v += " (before herd's instances: " + c.Original + ")"
		}
		attrs = append(attrs, c.Name, v)
	}
	p.log.Warn("every local instance's kubelet sets these host kernel settings (now -> instances); herd restores them when the last local instance is deleted (docs/host-settings.md)", attrs...)
}

// recordHostSettings records the host's values before the first instance starts. While a record
// exists (instances exist, or a crash came between the last deletion and the restore), it is
// kept: the host may already hold the instances' values. Callers hold the provider lock.
func (p *Provider) recordHostSettings() error {
	saved, err := p.readSaved()
	if err != nil || saved != nil {
		return err
	}
	s := savedSettings{RecordedAt: time.Now().UTC().Truncate(time.Second), Original: map[string]string{}}
	for _, hs := range KubeletHostSettings {
		v, err := p.readSysctl(hs.Name)
		if err != nil {
			return err
		}
		if v != "" {
			s.Original[hs.Name] = v
		}
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return statefile.WriteAtomic(filepath.Join(p.dir, hostSettingsFile), append(data, '\n'))
}

// restoreHostSettings puts the recorded values back once no instance is left, and then removes
// the record. A setting someone changed since (to neither the original nor the instances' value)
// is left as it is. Callers hold the provider lock.
func (p *Provider) restoreHostSettings() error {
	saved, err := p.readSaved()
	if err != nil || saved == nil {
		return err
	}
	records, err := p.records()
	if err != nil || len(records) > 0 {
		return err
	}
	var errs []error
	for _, hs := range KubeletHostSettings {
		orig, ok := saved.Original[hs.Name]
		if !ok {
			continue
		}
		cur, err := p.readSysctl(hs.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cur == orig {
			continue
		}
		if cur != hs.Value {
			p.log.Warn("a host kernel setting changed since herd's instances set it; leaving it", "setting", hs.Name, "now", cur, "instances", hs.Value, "before", orig)
			continue
		}
		if err := p.writeSysctl(hs.Name, orig); err != nil {
			errs = append(errs, err)
			continue
		}
		p.log.Info("restored a host kernel setting", "setting", hs.Name, "value", orig, "instances_set", cur)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restore the host's kernel settings (recorded in %s): %w", filepath.Join(p.dir, hostSettingsFile), err)
	}
	if err := os.Remove(filepath.Join(p.dir, hostSettingsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// withProviderLock runs f under the provider lock.
func (p *Provider) withProviderLock(f func() error) error {
	lk, err := statefile.Lock(filepath.Join(p.dir, lockFileName))
	if err != nil {
		return err
	}
	defer lk.Unlock()
	return f()
}
