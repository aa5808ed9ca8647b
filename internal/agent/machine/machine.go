// Package machine tells an agent that boots a whole machine from a herd disk image (herd image
// disk) who it is: the instance's name, address and options, made at first boot and never baked
// into the image.
//
// The configuration is user data, read without cloud-init from the first source that has it: a
// NoCloud seed (a small vfat or ISO 9660 file system labelled cidata, with the files user-data
// and meta-data), then EC2's instance metadata service (IMDSv2: a session token, then
// /latest/user-data and /latest/meta-data/instance-id). A machine with neither runs standalone
// under a name derived from its machine id. The address is the IPv4 address the machine reaches
// the default route from.
package machine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// UserData is what the user data may set, as YAML (a leading "#herd" line or cloud-config's
// "#cloud-config" line is a comment). Unknown fields are an error, so that a typo is not ignored.
type UserData struct {
	// Name is the instance's name, also its node name and hostname: a DNS label. Default: the
	// seed's local-hostname or instance-id, else "herd-" and the first 12 digits of the machine id.
	Name string `json:"name,omitempty"`
	// ReadyTimeout bounds the boot (a Go duration such as "10m"). Default: the agent's.
	ReadyTimeout string `json:"readyTimeout,omitempty"`
	// Credential is the instance's credential (internal/agentauth), which requests to the
	// agent's endpoints carry. Default: one made at first boot and kept in the state directory.
	Credential string `json:"credential,omitempty"`
}

// Identity is what the agent is told about the machine at boot.
type Identity struct {
	// Name is the instance's name (a DNS label).
	Name string
	// Address is the machine's IPv4 address.
	Address netip.Addr
	// ReadyTimeout is from the user data; zero when it sets none.
	ReadyTimeout time.Duration
	// Credential is from the user data; "" when it sets none.
	Credential string
	// Source says where the user data came from: "nocloud", "imds" or "none".
	Source string
}

// Sources are where the user data is looked for; the zero value is the machine's.
type Sources struct {
	// SeedLabels are the labels of a NoCloud seed's file system. Default: cidata, CIDATA.
	SeedLabels []string
	// ByLabel is the directory of udev's links by file system label. Default: /dev/disk/by-label.
	ByLabel string
	// IMDS is the base URL of the instance metadata service. Default: http://169.254.169.254.
	// "off" skips it.
	IMDS string
	// MachineID is the file with the machine id. Default: /etc/machine-id.
	MachineID string
	// Log receives what was found. Default: discard.
	Log *slog.Logger
}

func (s Sources) withDefaults() Sources {
	if len(s.SeedLabels) == 0 {
		s.SeedLabels = []string{"cidata", "CIDATA"}
	}
	if s.ByLabel == "" {
		s.ByLabel = "/dev/disk/by-label"
	}
	if s.IMDS == "" {
		s.IMDS = "http://169.254.169.254"
	}
	if s.MachineID == "" {
		s.MachineID = "/etc/machine-id"
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	return s
}

// seed is user data and the instance's name as its source knows it.
type seed struct {
	userData []byte
	// hostname is meta-data's local-hostname or instance-id, or EC2's instance id.
	hostname string
	source   string
}

// Discover reads the user data, derives the name and waits (until ctx ends) for the address.
func Discover(ctx context.Context, s Sources) (Identity, error) {
	s = s.withDefaults()
	sd, err := s.find(ctx)
	if err != nil {
		return Identity{}, err
	}
	ud, err := ParseUserData(sd.userData)
	if err != nil {
		return Identity{}, fmt.Errorf("user data from %s: %w", sd.source, err)
	}
	id := Identity{Name: ud.Name, Credential: ud.Credential, Source: sd.source}
	if ud.ReadyTimeout != "" {
		// ParseUserData checked it.
		id.ReadyTimeout, _ = time.ParseDuration(ud.ReadyTimeout)
	}
	if id.Name == "" {
		id.Name = nameFrom(sd.hostname)
	}
	if id.Name == "" {
		mid, err := os.ReadFile(s.MachineID)
		if err != nil {
			return Identity{}, fmt.Errorf("no name in the user data and no machine id: %w", err)
		}
		id.Name = nameFrom("herd-" + firstN(strings.TrimSpace(string(mid)), 12))
	}
	if !dnsLabel.MatchString(id.Name) {
		return Identity{}, fmt.Errorf("instance name %q (from %s): want a DNS label", id.Name, sd.source)
	}
	if id.Address, err = waitAddress(ctx); err != nil {
		return Identity{}, err
	}
	s.Log.Info("machine identity", "name", id.Name, "address", id.Address, "source", id.Source)
	return id, nil
}

// find returns the first source's seed, or an empty one from "none".
func (s Sources) find(ctx context.Context) (seed, error) {
	sd, ok, err := s.noCloud()
	if err != nil || ok {
		return sd, err
	}
	if s.IMDS != "off" {
		sd, ok, err := s.imds(ctx)
		if err != nil || ok {
			return sd, err
		}
	}
	return seed{source: "none"}, nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParseUserData reads user data: empty is the defaults.
func ParseUserData(data []byte) (UserData, error) {
	var ud UserData
	if len(strings.TrimSpace(string(data))) == 0 {
		return ud, nil
	}
	if err := yaml.UnmarshalStrict(data, &ud); err != nil {
		return ud, fmt.Errorf("want YAML with the fields name, readyTimeout and credential: %w", err)
	}
	if ud.Name != "" && !dnsLabel.MatchString(ud.Name) {
		return ud, fmt.Errorf("name %q: want a DNS label (lower-case letters, digits and '-', at most 63)", ud.Name)
	}
	if ud.ReadyTimeout != "" {
		if d, err := time.ParseDuration(ud.ReadyTimeout); err != nil || d <= 0 {
			return ud, fmt.Errorf("readyTimeout %q: want a positive duration such as 10m", ud.ReadyTimeout)
		}
	}
	return ud, nil
}

// nameFrom makes a DNS label of a host name or instance id: its first label, lower-case, with
// any other character made '-'; "" when nothing is left.
func nameFrom(h string) string {
	h, _, _ = strings.Cut(strings.ToLower(strings.TrimSpace(h)), ".")
	b := []byte(firstN(h, 63))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// waitAddress returns the IPv4 address the default route leaves from, once there is one. A UDP
// "connection" sends nothing: it only asks the kernel for the route.
func waitAddress(ctx context.Context) (netip.Addr, error) {
	for {
		c, err := net.Dial("udp4", "192.0.2.1:9")
		if err == nil {
			ap, perr := netip.ParseAddrPort(c.LocalAddr().String())
			c.Close()
			if perr == nil && !ap.Addr().IsUnspecified() {
				return ap.Addr(), nil
			}
			err = errors.Join(err, perr)
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("no IPv4 default route (is the network up?): %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
