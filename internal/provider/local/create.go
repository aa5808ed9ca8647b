// Create: checking the spec, the host and the image, allocating the address, setting up the
// network and starting the agent, recording each step before it is taken.

package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/statefile"
)

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
	if msgs := validation.IsDNS1123Label(spec.Region); len(msgs) > 0 {
		return provider.Instance{}, fmt.Errorf("instance %s: region %q must be a DNS label: %s", spec.Name, spec.Region, strings.Join(msgs, "; "))
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
	lk, err := statefile.Lock(filepath.Join(dir, lockFileName))
	if err != nil {
		return provider.Instance{}, fmt.Errorf("instance %s: %w", spec.Name, err)
	}
	defer lk.Unlock()

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
	if _, err := p.lab.EnsureNetwork(ctx, spec.Region, spec.Options); err != nil {
		return fail("region network", err)
	}
	if err := p.withProviderLock(p.recordHostSettings); err != nil {
		return fail("record the host's kernel settings", err)
	}
	if err := setupInstanceNetwork(ctx, rec); err != nil {
		return fail("network", err)
	}
	pid, start, err := p.startAgent(ctx, dir, rec, bundle)
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
	if hostnet.NetnsExists(netnsName(name)) {
		used = append(used, "network namespace "+netnsName(name))
	}
	if hostnet.LinkExists(vethName(name)) {
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

// startAgent starts herd-agent for the instance as the contract says, without waiting for it:
// it must outlive this process.
func (p *Provider) startAgent(ctx context.Context, dir string, rec *record, b image.Bundle) (int, uint64, error) {
	stateDir := filepath.Join(dir, agentDirName)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return 0, 0, err
	}
	args := []string{AgentBinary(p.opts.HerdBinary), "--state-dir", stateDir, "--cgroup-root", rec.CgroupRoot}
	if port := p.opts.EC2MetadataPort; port != 0 {
		// As on EC2: the metadata service and the user data say the rest.
		args = append(args, "--ec2",
			"--imds-endpoint", "http://"+net.JoinHostPort(rec.Gateway, strconv.Itoa(port)),
			"--images-dir", p.images.Root())
	} else {
		credFile := filepath.Join(dir, credentialFileName)
		if err := agentauth.WriteCredentialFile(credFile, p.opts.Credentials.Credential(rec.Spec.Name)); err != nil {
			return 0, 0, err
		}
		args = append(args,
			"--name", rec.Spec.Name,
			"--bundle", rec.BundleDir,
			"--address", rec.Address,
			"--credential-file", credFile)
		preloaded, err := preloadImages(ctx, b, stateDir)
		if err != nil {
			return 0, 0, err
		}
		if preloaded {
			args = append(args, "--images-preloaded")
		}
	}
	args = append(args, p.discoveryFlags(rec.Gateway)...)
	return hostproc.StartDetached(filepath.Join(dir, agentLogName), filepath.Join(hostnet.NetnsDir, rec.Netns), syscall.CLONE_NEWNS, args...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
