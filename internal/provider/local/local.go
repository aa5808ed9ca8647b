// Package local is herd's provider of real instances on this machine: each instance is a whole
// one-node Kubernetes cluster (etcd, kube-apiserver, scheduler, controller-manager, kubelet,
// kube-proxy, containerd and runc), booted by `herd agent` from a node image bundle, in a network
// namespace of its own with its own IP address on a host bridge.
//
// # Layout
//
// Everything the provider keeps is under <data dir>/providers/local/ (mode 0700):
//
//	lock                     flock taken to allocate subnets and addresses and to add or remove bridges
//	host-settings.json       the host's kernel settings from before the first instance (hostsettings.go)
//	regions/<region>.json    the region's /24 subnet (from 10.213.0.0/16), bridge and last address given
//	instances/<name>/        one instance (mode 0700):
//	  lock                   flock held by Create and Delete of this instance
//	  instance.json          the provider's record (spec, bundle, address, netns, veth, cgroup root,
//	                         agent pid and start time), written atomically, mode 0600
//	  agent.log              the agent's own stdout and stderr
//	  agent/                 the agent's state directory (status.json, kubeconfig, logs/, the cluster's data)
//
// On the host, an instance named N has the network namespace herd-N (eth0 with its address, a
// default route through the bridge), the host veth hv<hash of N> enslaved to its region's bridge
// herdbr-<hash of data dir and region> (whose address is the subnet's .1), and the cgroup /herd-N
// in every hierarchy, under which the agent puts every process of the instance. Instance
// addresses are .10 to .254 of the region's subnet. The host gets no iptables rule: the host
// reaches instances on the directly attached bridge, and every rule of the cluster lives in the
// instance's namespace.
//
// Addresses are allocated under the provider lock from the records on disk, and the record that
// holds an address is written before anything uses it, so that no crash can hand an address out
// twice. The provider and the agent follow the contract written in docs/local-instance.md: the
// provider starts the agent in the network namespace and in a mount namespace of its own, reads
// its state from agent/status.json and tells a dead agent by its pid and start time.
//
// Instances outlive the process that created them (Capabilities.Persistent): the next herd up
// lists them from the instance directories and adopts them by their labels.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider"
)

// Name is the provider name regions use.
const Name = "local"

// DefaultRegion is the region of instances whose spec names none.
const DefaultRegion = "local"

// DefaultSubnetPool is where regions' subnets come from.
var DefaultSubnetPool = netip.MustParsePrefix("10.213.0.0/16")

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.OptionsValidator = (*Provider)(nil)
)

// Options configure a local provider.
type Options struct {
	// DataDir is herd's data directory: instances are kept under <DataDir>/providers/local and
	// node image bundles are read from image.StoreDir(DataDir). Required.
	DataDir string
	// HerdBinary is the herd executable each instance's agent runs as (`herd agent`).
	// Default: this process's executable (os.Executable).
	HerdBinary string
	// Logger receives the provider's logs, with component=provider-local. Default: discard.
	Logger *slog.Logger
	// SubnetPool is the IPv4 range regions' /24 subnets are taken from. Default: 10.213.0.0/16.
	SubnetPool netip.Prefix
	// StopTimeout bounds how long Delete lets the agent stop the workload and the cluster after
	// SIGTERM before it kills every process of the instance. Default: 20s.
	StopTimeout time.Duration
	// SysctlRoot is where the host kernel settings instances change are recorded from and
	// restored to (see KubeletHostSettings). Default: /proc/sys; tests give a directory of their own.
	SysctlRoot string
}

// Provider runs instances as one-node Kubernetes clusters in network namespaces of this machine.
// It is safe for concurrent use, also by several processes sharing a data directory.
type Provider struct {
	opts   Options
	log    *slog.Logger
	dir    string // <DataDir>/providers/local
	images *image.Store

	// deps checks the host; tests replace it.
	deps func() error
}

// New returns a local provider for the data directory in opts. It creates the provider's
// directory but checks the host only when an instance is created, so that a control plane without
// the dependencies still starts and lists what exists.
func New(opts Options) (*Provider, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local provider: a data directory is required")
	}
	if opts.HerdBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local provider: find the herd binary: %w", err)
		}
		opts.HerdBinary = exe
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.SubnetPool.IsValid() {
		opts.SubnetPool = DefaultSubnetPool
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	if opts.SysctlRoot == "" {
		opts.SysctlRoot = DefaultSysctlRoot
	}
	if !opts.SubnetPool.Addr().Is4() || opts.SubnetPool.Bits() > subnetBits {
		return nil, fmt.Errorf("local provider: subnet pool %s must be an IPv4 prefix of /%d or shorter", opts.SubnetPool, subnetBits)
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("local provider: data dir: %w", err)
	}
	// Absolute and without symlinks: the paths given to the agent are compared with the mount
	// table and with the kubelet's log symlinks, which hold resolved paths.
	dataDir, err := filepath.Abs(opts.DataDir)
	if err == nil {
		dataDir, err = filepath.EvalSymlinks(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: data dir: %w", err)
	}
	opts.DataDir = dataDir
	if abs, err := filepath.Abs(opts.HerdBinary); err == nil {
		opts.HerdBinary = abs
	}
	p := &Provider{
		opts:   opts,
		log:    opts.Logger.With("component", "provider-local"),
		dir:    filepath.Join(dataDir, "providers", Name),
		images: image.NewStore(image.StoreDir(dataDir)),
	}
	p.deps = func() error { return CheckHost(p.opts.HerdBinary) }
	if err := os.MkdirAll(p.instancesDir(), 0o700); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	// A crash between the last instance's deletion and the restore left the record behind.
	if err := p.withProviderLock(p.restoreHostSettings); err != nil {
		p.log.Warn("the host's kernel settings from before herd's instances could not be restored", "err", err)
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider: instances outlive herd up.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Persistent: true}
}

// InstanceDir returns the directory of the instance name (whether or not it exists). The agent's
// state directory, with the admin kubeconfig, is its "agent" subdirectory.
func (p *Provider) InstanceDir(name string) string { return filepath.Join(p.instancesDir(), name) }

// HostNames returns the host-wide names an instance called name gets: its network namespace
// (/run/netns/<netns>), the host end of its veth pair, and the cgroup (in every hierarchy) every
// process of the instance runs under.
func HostNames(name string) (netns, hostVeth, cgroupRoot string) {
	return netnsName(name), vethName(name), cgroupRootOf(name)
}

// BridgeName returns the host bridge of a region of this provider's data directory.
func (p *Provider) BridgeName(region string) string { return bridgeName(p.opts.DataDir, region) }

func (p *Provider) instancesDir() string { return filepath.Join(p.dir, "instances") }
func (p *Provider) regionsDir() string   { return filepath.Join(p.dir, regionsSubdir) }

var labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidateOptions implements provider.OptionsValidator: the local provider takes no options.
func (p *Provider) ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList {
	return provider.UnknownOptions(path, opts, Name)
}

// Create implements provider.Provider. It checks the host and the image, gives the instance its
// address and network, starts its agent and returns it Booting; the cluster boots in the
// background. A Create that was interrupted (herd killed in the middle) is completed.
func (p *Provider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	if err := provider.ValidateSpec(spec); err != nil {
		return provider.Instance{}, err
	}
	if spec.Region == "" {
		spec.Region = DefaultRegion
	}
	if !labelRE.MatchString(spec.Region) || len(spec.Region) > 63 {
		return provider.Instance{}, fmt.Errorf("instance %s: region %q must be a DNS label", spec.Name, spec.Region)
	}
	if errs := p.ValidateOptions(field.NewPath("options"), spec.Options); len(errs) > 0 {
		return provider.Instance{}, fmt.Errorf("instance %s: region %s: %w", spec.Name, spec.Region, errs.ToAggregate())
	}
	dir := p.InstanceDir(spec.Name)
	if rec, err := readRecord(dir); err == nil && rec != nil && rec.Phase == phaseCreated {
		return p.view(dir, rec), nil
	}
	if err := p.deps(); err != nil {
		return provider.Instance{}, err
	}
	bundle, err := p.resolveImage(spec.Image)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}

	if err := os.MkdirAll(p.instancesDir(), 0o700); err != nil {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}
	lk, err := lockFile(filepath.Join(dir, lockFileName))
	if err != nil {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}
	defer lk.unlock()

	rec, err := readRecord(dir)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}
	switch {
	case rec == nil:
		if err := p.checkNameFree(spec.Name); err != nil {
			_ = os.RemoveAll(dir)
			return provider.Instance{}, err
		}
		rec = &record{
			Spec:       spec,
			ID:         "local-" + randomHex(8),
			Phase:      phaseCreating,
			BundleDir:  bundle.Dir,
			Netns:      netnsName(spec.Name),
			HostVeth:   vethName(spec.Name),
			CgroupRoot: cgroupRootOf(spec.Name),
			CreatedAt:  time.Now().UTC().Truncate(time.Millisecond),
		}
		rec.Spec.Image = bundle.Digest
		rec.Spec.Labels = maps.Clone(spec.Labels)
		rec.Spec.Options = nil
	case rec.Phase == phaseCreated:
		return p.view(dir, rec), nil
	case rec.Phase == phaseDeleting:
		return provider.Instance{}, fmt.Errorf("instance %s is being deleted: create it again once the deletion is done", spec.Name)
	default:
		// Interrupted: whatever it left is undone, keeping the record with its address.
		p.log.Warn("completing an interrupted create", "instance", spec.Name)
		if err := p.teardown(context.WithoutCancel(ctx), spec.Name, dir, rec); err != nil {
			return provider.Instance{}, fmt.Errorf("instance %s: clean up an interrupted create: %w", spec.Name, err)
		}
		if err := os.RemoveAll(filepath.Join(dir, agentDirName)); err != nil {
			return provider.Instance{}, fmt.Errorf("instance %s: clean up an interrupted create: %w", spec.Name, err)
		}
	}

	fail := func(what string, err error) (provider.Instance, error) {
		err = fmt.Errorf("instance %s: %s: %w", spec.Name, what, err)
		if cerr := p.destroy(context.WithoutCancel(ctx), spec.Name, dir, rec); cerr != nil {
			err = fmt.Errorf("%w (and cleaning up failed: %v)", err, cerr)
		}
		return provider.Instance{}, err
	}
	if err := p.allocate(ctx, dir, rec); err != nil {
		return fail("allocate an address", err)
	}
	if err := p.withProviderLock(p.recordHostSettings); err != nil {
		return fail("record the host's kernel settings", err)
	}
	if err := setupInstanceNetwork(ctx, rec); err != nil {
		return fail("network", err)
	}
	pid, start, err := p.startAgent(dir, rec)
	if err != nil {
		return fail("start the agent", err)
	}
	rec.AgentPID, rec.AgentStartTime, rec.Phase = pid, start, phaseCreated
	if err := writeRecord(dir, rec); err != nil {
		return fail("record the agent", err)
	}
	p.log.Info("instance created", "instance", spec.Name, "address", rec.Address, "region", rec.Spec.Region, "image", rec.Spec.Image, "agent_pid", pid)
	return p.view(dir, rec), nil
}

// resolveImage finds the bundle an image reference (a digest or a NodeImage name) names.
func (p *Provider) resolveImage(ref string) (image.Bundle, error) {
	digest, err := p.images.Resolve(ref)
	if errors.Is(err, image.ErrNotFound) {
		return image.Bundle{}, fmt.Errorf("image %s not found: build it with herd image build -f <image.yaml> (node images are looked up in %s): %w", ref, p.images.Root(), image.ErrNotFound)
	}
	if err != nil {
		return image.Bundle{}, fmt.Errorf("image %s: %w", ref, err)
	}
	b, err := p.images.Get(digest)
	if err != nil {
		return image.Bundle{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return b, nil
}

// checkNameFree fails when the host already has the network namespace, veth or cgroup a new
// instance of this name would get: another herd data directory runs an instance of that name.
func (p *Provider) checkNameFree(name string) error {
	var used []string
	if netnsExists(netnsName(name)) {
		used = append(used, "network namespace "+netnsName(name))
	}
	if linkExists(vethName(name)) {
		used = append(used, "link "+vethName(name))
	}
	if hier, err := cgroupHierarchies(); err == nil {
		for _, h := range hier {
			if _, err := os.Stat(filepath.Join(h, cgroupRootOf(name))); err == nil {
				used = append(used, "cgroup "+filepath.Join(h, cgroupRootOf(name)))
				break
			}
		}
	}
	if len(used) > 0 {
		return fmt.Errorf("instance %s: the name is in use on this host by something outside %s (%s): delete that instance, or remove what is left of it, first", name, p.dir, strings.Join(used, ", "))
	}
	return nil
}

// startAgent starts `herd agent` for the instance as the contract says, without waiting for it:
// it must outlive this process.
func (p *Provider) startAgent(dir string, rec *record) (int, uint64, error) {
	stateDir := filepath.Join(dir, agentDirName)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return 0, 0, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, agentLogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("open agent log: %w", err)
	}
	defer logf.Close()
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return 0, 0, fmt.Errorf("nsenter: %w (install util-linux)", err)
	}
	cmd := exec.Command(nsenter, "--net="+filepath.Join(netnsDir, rec.Netns), "--",
		p.opts.HerdBinary, "agent",
		"--name", rec.Spec.Name,
		"--bundle", rec.BundleDir,
		"--state-dir", stateDir,
		"--address", rec.Address,
		"--cgroup-root", rec.CgroupRoot)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	pid := cmd.Process.Pid
	// Not reaped until Wait below, so /proc/<pid>/stat is there even if it already exited.
	st, ok := readProcStat(pid)
	go func() { _ = cmd.Wait() }() // reap it if it exits while this process runs
	if !ok {
		return 0, 0, fmt.Errorf("agent pid %d vanished at once", pid)
	}
	return pid, st.StartTime, nil
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, name string) (provider.Instance, error) {
	if !provider.ValidName(name) {
		return provider.Instance{}, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	dir := p.InstanceDir(name)
	rec, err := readRecord(dir)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: %w", err)
	}
	if rec == nil {
		return provider.Instance{}, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	return p.view(dir, rec), nil
}

// List implements provider.Provider: it reads the instance directories, so it finds every
// instance of the data directory, also those created by an earlier herd up.
func (p *Provider) List(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	records, err := p.records()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	out := make([]provider.Instance, 0, len(records))
	for _, r := range records {
		if opts.Matches(r.Spec.Labels) {
			out = append(out, p.view(p.InstanceDir(r.Spec.Name), r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// records reads every instance record. Directories without one (a Create that died before
// writing it, which made nothing else) are skipped.
func (p *Provider) records() ([]*record, error) {
	entries, err := os.ReadDir(p.instancesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, e := range entries {
		if !e.IsDir() || !provider.ValidName(e.Name()) {
			continue
		}
		r, err := readRecord(filepath.Join(p.instancesDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// Delete implements provider.Provider, as the contract says: SIGTERM the agent and wait for it,
// then kill whatever is left in the instance's cgroup, remove its cgroups, mounts, network
// namespace, veth, log symlinks and directory, and the region's bridge with its last instance.
// It works on what an interrupted Create or Delete left, and on a missing instance.
func (p *Provider) Delete(ctx context.Context, name string) error {
	if !provider.ValidName(name) {
		return nil
	}
	dir := p.InstanceDir(name)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	lk, err := lockFile(filepath.Join(dir, lockFileName))
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	defer lk.unlock()
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	if err := p.destroy(ctx, name, dir, rec); err != nil {
		return fmt.Errorf("delete instance %s: %w", name, err)
	}
	p.log.Info("instance deleted", "instance", name)
	return nil
}

// destroy removes everything of an instance, its directory last, and the region's bridge if it
// was the region's last instance. The caller holds the instance lock.
func (p *Provider) destroy(ctx context.Context, name, dir string, rec *record) error {
	if rec != nil && rec.Phase != phaseDeleting {
		rec.Phase = phaseDeleting
		if err := writeRecord(dir, rec); err != nil {
			return err
		}
	}
	if err := p.teardown(ctx, name, dir, rec); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if rec != nil && rec.Bridge != "" {
		if err := p.releaseBridge(ctx, rec.Spec.Region, rec.Bridge); err != nil {
			return err
		}
	}
	// The instance is gone whatever happens here: a failed restore is reported, not retried by
	// deleting again (the next herd up, or the next last deletion, tries again).
	if err := p.withProviderLock(p.restoreHostSettings); err != nil {
		p.log.Warn("the host's kernel settings from before herd's instances could not be restored", "err", err)
	}
	return nil
}

// agentStatus is what the provider reads of the agent's <state dir>/status.json (see
// docs/local-instance.md for the whole file).
type agentStatus struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

// Agent phases (status.json).
const (
	agentBooting  = "Booting"
	agentReady    = "Ready"
	agentFailed   = "Failed"
	agentStopping = "Stopping"
	agentStopped  = "Stopped"
)

// readStatus returns the status of the agent of the instance in dir; its Phase is "" while the
// agent has written none yet (or one that does not parse), which view reports as Booting.
func readStatus(dir string) agentStatus {
	var st agentStatus
	if data, err := os.ReadFile(filepath.Join(dir, agentDirName, statusFile)); err == nil {
		_ = json.Unmarshal(data, &st)
	}
	return st
}

// view turns a record and the agent's status into what the provider reports.
func (p *Provider) view(dir string, r *record) provider.Instance {
	in := provider.Instance{
		Name:       r.Spec.Name,
		Labels:     maps.Clone(r.Spec.Labels),
		Image:      r.Spec.Image,
		Region:     r.Spec.Region,
		ProviderID: r.ID,
		Address:    r.Address,
		CreatedAt:  r.CreatedAt,
		State:      provider.StateBooting,
	}
	switch r.Phase {
	case phaseDeleting:
		in.State = provider.StateDeleting
		return in
	case phaseCreating:
		if !isLocked(filepath.Join(dir, lockFileName)) {
			in.State = provider.StateFailed
			in.Reason = "creating the instance was interrupted (herd stopped in the middle): delete it, or create it again to complete it"
		}
		return in
	}
	st := readStatus(dir)
	running := alive(r.AgentPID, r.AgentStartTime)
	switch {
	case st.Phase == agentFailed:
		in.State, in.Reason = provider.StateFailed, st.Reason
		if in.Reason == "" {
			in.Reason = "the agent reported a failure without a reason: see " + filepath.Join(dir, agentLogName)
		}
	case st.Phase == agentStopping || st.Phase == agentStopped:
		in.State = provider.StateFailed
		in.Reason = fmt.Sprintf("the agent was stopped from outside herd (status %s)", st.Phase)
		if st.Reason != "" {
			in.Reason += ": " + st.Reason
		}
	case !running:
		in.State = provider.StateFailed
		in.Reason = "agent exited unexpectedly; " + logTail(filepath.Join(dir, agentLogName), 5)
	case st.Phase == agentReady:
		in.State = provider.StateReady
	}
	return in
}

// logTail returns the last n non-empty lines of a log file, for a failure reason.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "no agent log (" + path + ")"
	}
	defer f.Close()
	const window = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return path + " is empty"
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "last lines of " + path + ": " + strings.Join(lines, " | ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
