package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/agent/cgroups"
)

// errSharedMountNS is returned when the agent would share the host's mount namespace.
var errSharedMountNS = errors.New("herd-agent must run in its own mount namespace, or the mounts of " +
	"its containers would land on the host: the local provider starts it that way; by hand, use " +
	"`unshare --mount --propagation slave herd-agent ...`")

// isolate confines the agent before it starts anything: it checks that it has a mount namespace
// of its own, makes every mount in it a slave of the host's (host mounts still propagate in;
// nothing the instance mounts propagates out), and, when cgroupRoot is set, moves itself into
// <cgroupRoot>/system in every hierarchy so that everything it starts is inside cgroupRoot.
func isolate(cgroupRoot string, log *slog.Logger) ([]cgroups.Hierarchy, error) {
	if err := checkOwnMountNS(); errors.Is(err, errUnverifiedMountNS) {
		log.Warn(err.Error())
	} else if err != nil {
		return nil, err
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("making / a slave mount: %w", err)
	}
	if cgroupRoot == "" {
		return nil, nil
	}
	hs, err := cgroups.Hierarchies()
	if err != nil {
		return nil, err
	}
	if err := cgroups.Enter(hs, path.Join(cgroupRoot, "system")); err != nil {
		return nil, err
	}
	return hs, nil
}

// initMountNSInode is the inode of the initial mount namespace on kernels that give the initial
// namespaces fixed inode numbers (6.x); on older kernels no namespace has it.
const initMountNSInode = "mnt:[4026531832]"

// checkOwnMountNS returns errSharedMountNS when the agent shares its mount namespace with the
// host: with PID 1's (when it may be read: PID 1 can be non-dumpable), or with the process that
// started the agent (the provider, or the shell that ran unshare), or when it is the initial one.
func checkOwnMountNS() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("reading the agent's mount namespace: %w", err)
	}
	if self == initMountNSInode {
		return errSharedMountNS
	}
	compared := false
	for _, other := range []string{"/proc/1/ns/mnt", fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid())} {
		ns, err := os.Readlink(other)
		if err != nil {
			continue
		}
		compared = true
		if ns == self {
			return errSharedMountNS
		}
	}
	if !compared {
		// Neither could be read (PID 1 non-dumpable, the starter gone): the namespace is not the
		// initial one (checked above on kernels that can tell), which is all that can be known.
		return errUnverifiedMountNS
	}
	return nil
}

// errUnverifiedMountNS is returned by checkOwnMountNS when no other mount namespace could be
// read to compare with; isolate logs it and goes on.
var errUnverifiedMountNS = errors.New("could not compare the agent's mount namespace with the host's (PID 1's and the parent's are unreadable); assuming it is its own")
