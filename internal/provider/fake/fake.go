// Package fake is an in-memory provider for tests and scale benchmarks. Instances are records, not
// machines: they "boot" by waiting out a configurable delay. Failures can be injected. With a state
// directory, instances are also written to disk, one file each, so that they outlive the process the
// way real instances do; that lets tests kill and restart the control plane and check adoption.
//
// A fleet's region options can shape fake instances, so that tests drive timing through an ordinary
// Fleet spec: "bootDelay" (how long an instance boots, a Go duration) and "createDelay" (how long
// Create takes). "serve" (ports) makes each instance answer HTTP on its loopback address, so that
// a fleet with listeners passes its health checks and its traffic is real.
//
// It is never what a user runs in production: `herd up --provider fake` says so.
package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// Name is the provider name regions use.
const Name = "fake"

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.OptionsValidator = (*Provider)(nil)
	_ provider.Notifier         = (*Provider)(nil)
)

// Options configure a fake provider.
type Options struct {
	// BootDelay is how long a new instance stays Booting before it is Ready. Default: 0.
	BootDelay time.Duration
	// StateDir, when set, keeps one JSON file per instance there so instances survive restarts.
	StateDir string
	// Now returns the time; default time.Now. Tests may replace it.
	Now func() time.Time
}

// record is what is kept of an instance.
type record struct {
	Spec      provider.InstanceSpec `json:"spec"`
	ID        string                `json:"id"`
	Address   string                `json:"address"`
	CreatedAt time.Time             `json:"createdAt"`
	BootDelay time.Duration         `json:"bootDelay"`
	Failed    string                `json:"failed,omitempty"`

	// servers answer HTTP for the instance (the serve option); serveErr is why they could not.
	servers  []*http.Server
	serveErr string
}

// Provider is the fake provider.
type Provider struct {
	opts Options

	mu        sync.Mutex
	instances map[string]*record
	// byFleet indexes instances by their fleet label, so that listing one fleet costs its own
	// instances, not every instance of the provider.
	byFleet  map[string]map[string]*record
	notify   []func(fleet string)
	nextAddr uint32
	calls    map[string]int
	failNext map[string][]error // method -> errors to return on the next calls
	failFunc func(method, name string) error
	broken   map[string]string // image -> reason its instances fail once booted
	// regionDown maps a region to the error every call about it returns (FailRegion).
	regionDown map[string]error
}

// New returns a fake provider, loading instances from opts.StateDir if set.
func New(opts Options) (*Provider, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Provider{opts: opts, instances: map[string]*record{}, byFleet: map[string]map[string]*record{}, calls: map[string]int{}, failNext: map[string][]error{}, broken: map[string]string{}, regionDown: map[string]error{}}
	if opts.StateDir == "" {
		return p, nil
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("fake provider state dir: %w", err)
	}
	entries, err := os.ReadDir(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("fake provider state dir: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(opts.StateDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("fake provider state: %w", err)
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("fake provider state %s: %w", e.Name(), err)
		}
		p.add(&r)
		p.serve(&r)
		// Continue numbering after the highest number in use, so addresses never repeat.
		var n uint32
		if _, err := fmt.Sscanf(r.ID, "fake-%d", &n); err == nil && n > p.nextAddr {
			p.nextAddr = n
		}
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Persistent: p.opts.StateDir != "", Imageless: true}
}

// FailNext makes the next calls of method ("Create", "Delete", "Get", "List") return errs, one each.
func (p *Provider) FailNext(method string, errs ...error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failNext[method] = append(p.failNext[method], errs...)
}

// FailWith installs a function consulted on every call; a non-nil result is returned as the error.
// name is the instance name ("" for List).
func (p *Provider) FailWith(f func(method, name string) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failFunc = f
}

// FailRegion makes every call about region fail with err, as a cloud region's API that is down
// does: Create of an instance in it, List of it (ListOptions.Region), and Delete and Get of its
// instances. A nil err brings the region back.
func (p *Provider) FailRegion(region string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.regionDown, region)
		return
	}
	p.regionDown[region] = err
}

// regionErr returns the error of a region made to fail (FailRegion). p.mu must be held.
func (p *Provider) regionErr(region string) error {
	if err := p.regionDown[region]; err != nil {
		return fmt.Errorf("fake: region %s: %w", region, err)
	}
	return nil
}

// instanceRegionErr is regionErr for the region of an instance, if the provider has it. p.mu
// must be held.
func (p *Provider) instanceRegionErr(name string) error {
	if r, ok := p.instances[name]; ok {
		return p.regionErr(r.Spec.Region)
	}
	return nil
}

// Notify implements provider.Notifier: f hears of instances killed (Kill) and of the fleets
// whose instances' image broke or was mended (BreakImage).
func (p *Provider) Notify(f func(fleet string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = append(p.notify, f)
}

// notifyLocked returns a function that tells every subscriber of fleets, to call once p.mu is
// released. p.mu must be held.
func (p *Provider) notifyLocked(fleets ...string) func() {
	subs := slices.Clone(p.notify)
	return func() {
		for _, fleet := range fleets {
			for _, f := range subs {
				f(fleet)
			}
		}
	}
}

// Kill marks an instance Failed, as if its machine died.
func (p *Provider) Kill(name, reason string) error {
	p.mu.Lock()
	r, ok := p.instances[name]
	if !ok {
		p.mu.Unlock()
		return provider.ErrNotFound
	}
	r.Failed = reason
	err := p.persist(r)
	tell := p.notifyLocked(r.Spec.Labels[v1alpha1.LabelFleet])
	p.mu.Unlock()
	tell()
	return err
}

// BreakImage makes every instance of image, present and future, fail with reason once it has
// booted, as a broken image does; reason "" mends the image.
func (p *Provider) BreakImage(image, reason string) {
	p.mu.Lock()
	if reason == "" {
		delete(p.broken, image)
	} else {
		p.broken[image] = reason
	}
	var fleets []string
	for fleet, byName := range p.byFleet {
		for _, r := range byName {
			if r.Spec.Image == image {
				fleets = append(fleets, fleet)
				break
			}
		}
	}
	sort.Strings(fleets)
	tell := p.notifyLocked(fleets...)
	p.mu.Unlock()
	tell()
}

// add indexes a record. p.mu must be held.
func (p *Provider) add(r *record) {
	p.instances[r.Spec.Name] = r
	fleet := r.Spec.Labels[v1alpha1.LabelFleet]
	if p.byFleet[fleet] == nil {
		p.byFleet[fleet] = map[string]*record{}
	}
	p.byFleet[fleet][r.Spec.Name] = r
}

// remove drops a record from the indexes. p.mu must be held.
func (p *Provider) remove(r *record) {
	delete(p.instances, r.Spec.Name)
	fleet := r.Spec.Labels[v1alpha1.LabelFleet]
	delete(p.byFleet[fleet], r.Spec.Name)
	if len(p.byFleet[fleet]) == 0 {
		delete(p.byFleet, fleet)
	}
}

// Calls returns how many times method was called.
func (p *Provider) Calls(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[method]
}

// injected returns the error to inject for this call, if any. p.mu must be held.
func (p *Provider) injected(method, name string) error {
	p.calls[method]++
	if q := p.failNext[method]; len(q) > 0 {
		p.failNext[method] = q[1:]
		return q[0]
	}
	if p.failFunc != nil {
		return p.failFunc(method, name)
	}
	return nil
}

// Region options the fake provider takes: durations that override Options.BootDelay and delay
// Create itself.
const (
	optBootDelay   = "bootDelay"
	optCreateDelay = "createDelay"
)

// ValidateOptions implements provider.OptionsValidator: bootDelay and createDelay, each a
// duration of at least 0, and serve, a list of ports.
func (p *Provider) ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList {
	errs := provider.UnknownOptions(path, opts, Name, optBootDelay, optCreateDelay, optServe)
	errs = append(errs, validateServe(path, opts)...)
	for _, k := range []string{optBootDelay, optCreateDelay} {
		v, ok := opts[k]
		if !ok {
			continue
		}
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			errs = append(errs, field.Invalid(path.Child(k), v, "must be a duration of at least 0 such as \"2s\""))
		}
	}
	return errs
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	if err := provider.ValidateSpec(spec); err != nil {
		return provider.Instance{}, err
	}
	bootDelay, createDelay := p.opts.BootDelay, time.Duration(0)
	for key, dst := range map[string]*time.Duration{optBootDelay: &bootDelay, optCreateDelay: &createDelay} {
		if v, ok := spec.Options[key]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return provider.Instance{}, fmt.Errorf("fake: region option %s: %q is not a duration such as \"2s\"", key, v)
			}
			*dst = d
		}
	}
	if createDelay > 0 {
		select {
		case <-time.After(createDelay):
		case <-ctx.Done():
			return provider.Instance{}, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.injected("Create", spec.Name); err != nil {
		return provider.Instance{}, err
	}
	if err := p.regionErr(spec.Region); err != nil {
		return provider.Instance{}, err
	}
	if r, ok := p.instances[spec.Name]; ok {
		return p.view(r), nil
	}
	p.nextAddr++
	n := p.nextAddr
	// Loopback addresses: anything that probes a fake instance stays on this machine.
	r := &record{
		Spec:      spec,
		ID:        fmt.Sprintf("fake-%08d", n),
		Address:   fmt.Sprintf("127.%d.%d.%d", 1+(n>>16)&0x7f, (n>>8)&0xff, n&0xff),
		CreatedAt: p.opts.Now(),
		BootDelay: bootDelay,
	}
	r.Spec.Labels = maps.Clone(spec.Labels)
	if err := p.persist(r); err != nil {
		return provider.Instance{}, err
	}
	p.add(r)
	p.serve(r)
	return p.view(r), nil
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, name string) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.injected("Get", name); err != nil {
		return provider.Instance{}, err
	}
	if err := p.instanceRegionErr(name); err != nil {
		return provider.Instance{}, err
	}
	r, ok := p.instances[name]
	if !ok {
		return provider.Instance{}, fmt.Errorf("fake: %s: %w", name, provider.ErrNotFound)
	}
	return p.view(r), nil
}

// List implements provider.Provider.
func (p *Provider) List(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.injected("List", ""); err != nil {
		return nil, err
	}
	if err := p.regionErr(opts.Region); err != nil {
		return nil, err
	}
	from := p.instances
	if opts.Fleet != "" {
		from = p.byFleet[opts.Fleet]
	}
	out := make([]provider.Instance, 0, len(from))
	for _, r := range from {
		if opts.Matches(r.Spec.Labels) {
			out = append(out, p.view(r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Delete implements provider.Provider.
func (p *Provider) Delete(ctx context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.injected("Delete", name); err != nil {
		return err
	}
	if err := p.instanceRegionErr(name); err != nil {
		return err
	}
	r, ok := p.instances[name]
	if !ok {
		return nil
	}
	if p.opts.StateDir != "" {
		if err := os.Remove(p.file(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("fake: delete %s: %w", name, err)
		}
	}
	p.stopServing(r)
	p.remove(r)
	return nil
}

func (p *Provider) view(r *record) provider.Instance {
	in := r.Spec.Booting(r.ID, r.Address, r.CreatedAt)
	booted := p.opts.Now().Sub(r.CreatedAt) >= r.BootDelay
	switch {
	case r.Failed != "":
		in.State, in.Reason = provider.StateFailed, r.Failed
	case r.serveErr != "":
		in.State, in.Reason = provider.StateFailed, r.serveErr
	case booted && p.broken[r.Spec.Image] != "":
		in.State, in.Reason = provider.StateFailed, p.broken[r.Spec.Image]
	case booted:
		in.State = provider.StateReady
	}
	return in
}

func (p *Provider) file(name string) string { return filepath.Join(p.opts.StateDir, name+".json") }

// persist writes a record atomically (temp file + rename) so a crash leaves the old or new file.
func (p *Provider) persist(r *record) error {
	if p.opts.StateDir == "" {
		return nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := p.file(r.Spec.Name) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("fake: persist %s: %w", r.Spec.Name, err)
	}
	if err := os.Rename(tmp, p.file(r.Spec.Name)); err != nil {
		return fmt.Errorf("fake: persist %s: %w", r.Spec.Name, err)
	}
	return nil
}

// KillInstance implements provider.InstanceKiller: the instance fails as if every process of it
// had been killed.
func (p *Provider) KillInstance(ctx context.Context, name string) error {
	return p.Kill(name, "killed: every process got SIGKILL")
}
