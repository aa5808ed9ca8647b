// Config: what the agent is told (the flags of herd-agent), its defaults and its checks, and the
// distributions it can boot.

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/distro/upstream"
)

// Defaults of Config.
const (
	// DefaultPort is the port of the agent's HTTP endpoints on the instance address.
	DefaultPort = 10260
	// DefaultReadyTimeout bounds the boot: from the agent's start until the node is Ready and
	// every baked workload is available.
	DefaultReadyTimeout = 3 * time.Minute
	// DefaultStopTimeout bounds the graceful stop of the workload on SIGTERM. The cluster's
	// components are stopped after it, within a few seconds more.
	DefaultStopTimeout = 10 * time.Second
)

// Patience is what a Patient agent waits longer for.
var Patience = struct {
	// ApplyRetry bounds the retries of a manifest's object (default 30 s).
	ApplyRetry time.Duration
	// Check bounds one readiness check once Ready (default 5 s).
	Check time.Duration
}{ApplyRetry: 5 * time.Minute, Check: 20 * time.Second}

// Distributions returns the distributions this herd can boot, by name. Adding one is one line.
func Distributions() map[string]distro.Distro {
	return map[string]distro.Distro{
		upstream.Name: upstream.New(),
	}
}

// Config is what the agent is told.
type Config struct {
	// Name is the instance's name, also its node name: a DNS label. Required.
	Name string
	// BundleDir is the node image bundle to boot from. Required.
	BundleDir string
	// StateDir holds everything the agent and the cluster write. Required; made mode 0700.
	StateDir string
	// Address is the instance's IP address, where the API server, the kubelet and the agent's
	// endpoints listen. Required.
	Address netip.Addr
	// CgroupRoot confines the agent and everything it starts (e.g. "/herd-web-1"): the agent
	// moves itself into <CgroupRoot>/system and the kubelet puts pods under
	// <CgroupRoot>/kubepods. Default: none (stay where started; the distribution's default).
	CgroupRoot string
	// ReadyTimeout bounds the boot. Default: DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// StopTimeout bounds the graceful stop of the workload. Default: DefaultStopTimeout.
	StopTimeout time.Duration
	// Port is the port of the HTTP endpoints. Default: DefaultPort.
	Port int
	// Credential is the instance's credential (internal/agentauth): the endpoints answer only
	// requests that carry it, and prove to herd up that they hold it too. Required.
	Credential string
	// Logger receives the agent's log. Default: discard.
	Logger *slog.Logger
	// Distros are the distributions to choose from by the bundle's
	// spec.kubernetes.distribution. Default: Distributions().
	Distros map[string]distro.Distro
	// ImagesPreloaded says that the bundle's images are in the container runtime's store
	// already (a disk image unpacks them there at build time): the agent neither checks their
	// tars, which the bundle directory may lack, nor imports them.
	ImagesPreloaded bool
	// Patient gives a machine that may be starved of CPU (a disk image booted under emulation,
	// a small cloud instance) the longer bounds of Patience where the defaults assume a
	// responsive one. Local instances keep the defaults.
	Patient bool
	// Discovery, when set, makes the image's cluster DNS forward herd's discovery zone to
	// herd's discovery DNS (discovery.go). Default: none.
	Discovery *Discovery
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// withDefaults fills the defaults in and checks the config.
func (c Config) withDefaults() (Config, error) {
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Distros == nil {
		c.Distros = Distributions()
	}
	var errs []error
	if !dnsLabel.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("--name %q: want a DNS label (lower-case letters, digits and '-', at most 63)", c.Name))
	}
	if c.BundleDir == "" {
		errs = append(errs, errors.New("--bundle is required: the node image bundle directory"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("--state-dir is required"))
	}
	if !c.Address.IsValid() {
		errs = append(errs, errors.New("--address is required: the instance's IP address"))
	}
	if c.Credential == "" {
		errs = append(errs, errors.New("--credential-file is required: the instance's credential, which herd up's requests to the agent carry"))
	}
	if c.CgroupRoot != "" && (!strings.HasPrefix(c.CgroupRoot, "/") || path.Clean(c.CgroupRoot) != c.CgroupRoot || c.CgroupRoot == "/") {
		errs = append(errs, fmt.Errorf("--cgroup-root %q: want an absolute cgroup path below / such as /herd-%s", c.CgroupRoot, c.Name))
	}
	if c.ReadyTimeout < 0 || c.StopTimeout < 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: want 1-65535", c.Port))
	}
	if c.Discovery != nil {
		if err := c.Discovery.check(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.StateDir != "" {
		abs, err := filepath.Abs(c.StateDir)
		if err != nil {
			errs = append(errs, err)
		}
		c.StateDir = abs
	}
	return c, errors.Join(errs...)
}
