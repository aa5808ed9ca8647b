package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agent/machine"
	"herd.dev/herd/internal/agentauth"
)

// newMachineCommand is the agent of a machine booted from a disk image (herd image disk): it
// learns the instance's name and address from the machine itself at boot.
func newMachineCommand() *cobra.Command {
	cfg := agent.Config{}
	var logLevel string
	var src machine.Sources
	cmd := &cobra.Command{
		Use:   "machine --bundle DIR --state-dir DIR",
		Short: "Run the instance that is this whole machine (the disk image's boot unit runs it)",
		Long: `The disk images of herd image disk start herd-agent machine at boot. It reads the user data
from a NoCloud seed (a vfat or ISO 9660 file system labelled cidata with user-data and meta-data)
or else EC2's IMDSv2, takes the instance's name from it (or the seed's local-hostname or
instance-id, else herd-<machine id>), sets the hostname, and runs the instance on the IPv4 address
of the default route, as herd-agent does with flags.

User data is YAML with the optional fields name, readyTimeout and credential (what requests to
the agent's endpoints carry; without it one is made at first boot and kept in
<state-dir>/credential).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			src.Log = log.With("component", "machine")
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			id, err := machine.Discover(ctx, src)
			cancel()
			if err != nil {
				return err
			}
			// The root is grown to the machine's disk at boot (systemd-repart, systemd-growfs).
			var st unix.Statfs_t
			if err := unix.Statfs("/", &st); err == nil {
				src.Log.Info("root file system", "size_mb", st.Blocks*uint64(st.Bsize)>>20, "free_mb", st.Bavail*uint64(st.Bsize)>>20)
			}
			if err := unix.Sethostname([]byte(id.Name)); err != nil {
				return fmt.Errorf("setting the hostname to %s: %w", id.Name, err)
			}
			cfg.Name, cfg.Address, cfg.Credential = id.Name, id.Address, id.Credential
			if cfg.Credential == "" {
				if cfg.Credential, err = firstBootCredential(filepath.Join(cfg.StateDir, "credential")); err != nil {
					return err
				}
			}
			if id.ReadyTimeout > 0 {
				cfg.ReadyTimeout = id.ReadyTimeout
			}
			cfg.Logger = log.With("component", "agent", "instance", cfg.Name)
			debug.SetGCPercent(50)
			return agent.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&cfg.BundleDir, "bundle", "", "the node image bundle directory to boot from")
	f.StringVar(&cfg.StateDir, "state-dir", "", "directory for everything the agent and the cluster write")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", agent.DefaultReadyTimeout, "fail the instance if it is not Ready this long after the agent starts (the user data's readyTimeout wins)")
	f.IntVar(&cfg.Port, "port", agent.DefaultPort, "port of the agent's HTTP endpoints")
	f.BoolVar(&cfg.ImagesPreloaded, "images-preloaded", false, "the bundle's images are in containerd's store under --state-dir already (herd image disk puts them there): neither check nor import their tars")
	f.BoolVar(&cfg.Patient, "patient", true, "give the components' health checks and the manifests' retries the longer bounds of a machine that may be starved of CPU (emulated, small)")
	f.StringVar(&src.IMDS, "imds", "", `base URL of EC2's instance metadata service ("off" to skip; default http://169.254.169.254)`)
	return cmd
}

// firstBootCredential is the credential kept in path, made there the first time.
func firstBootCredential(path string) (string, error) {
	if c, err := agentauth.ReadCredentialFile(path); err == nil {
		return c, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	c := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return c, agentauth.WriteCredentialFile(path, c)
}
