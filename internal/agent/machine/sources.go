// The two sources of user data: a NoCloud seed and EC2's IMDSv2.

package machine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
)

// noCloud mounts the seed file system read-only, if there is one, and reads user-data and
// meta-data from it.
func (s Sources) noCloud() (seed, bool, error) {
	var dev string
	for _, l := range s.SeedLabels {
		if _, err := os.Stat(filepath.Join(s.ByLabel, l)); err == nil {
			dev = filepath.Join(s.ByLabel, l)
			break
		}
	}
	if dev == "" {
		return seed{}, false, nil
	}
	dir, err := os.MkdirTemp("", "herd-seed-")
	if err != nil {
		return seed{}, false, err
	}
	defer os.Remove(dir)
	var errs []error
	mounted := false
	for _, fstype := range []string{"vfat", "iso9660"} {
		err := unix.Mount(dev, dir, fstype, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		if err == nil {
			mounted = true
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", fstype, err))
	}
	if !mounted {
		return seed{}, false, fmt.Errorf("mounting the seed %s: %w", dev, errors.Join(errs...))
	}
	defer unix.Unmount(dir, 0)
	sd, err := readSeedDir(dir)
	return sd, err == nil, err
}

// readSeedDir reads a mounted NoCloud seed: user-data (may be missing) and meta-data's
// local-hostname or instance-id.
func readSeedDir(dir string) (seed, error) {
	sd := seed{source: "nocloud"}
	ud, err := os.ReadFile(filepath.Join(dir, "user-data"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return sd, fmt.Errorf("seed user-data: %w", err)
	}
	sd.userData = ud
	md, err := os.ReadFile(filepath.Join(dir, "meta-data"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return sd, fmt.Errorf("seed meta-data: %w", err)
	}
	var meta struct {
		LocalHostname string `json:"local-hostname"`
		InstanceID    string `json:"instance-id"`
	}
	if err := yaml.Unmarshal(md, &meta); err != nil {
		return sd, fmt.Errorf("seed meta-data: %w", err)
	}
	sd.hostname = meta.LocalHostname
	if sd.hostname == "" {
		sd.hostname = meta.InstanceID
	}
	return sd, nil
}

// imdsTimeout bounds each request to the metadata service: off EC2 nothing answers.
const imdsTimeout = 2 * time.Second

// imds asks EC2's instance metadata service (IMDSv2) for the user data and the instance id.
// ok is false when no metadata service answers.
func (s Sources) imds(ctx context.Context) (seed, bool, error) {
	c := &http.Client{Timeout: imdsTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.IMDS+"/latest/api/token", nil)
	if err != nil {
		return seed{}, false, err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "300")
	resp, err := c.Do(req)
	if err != nil {
		return seed{}, false, nil // no metadata service
	}
	token, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return seed{}, false, fmt.Errorf("IMDSv2 token: %s %v", resp.Status, err)
	}
	get := func(path string) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.IMDS+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-aws-ec2-metadata-token", string(token))
		resp, err := c.Do(req)
		if err != nil {
			return nil, fmt.Errorf("IMDS %s: %w", path, err)
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			return io.ReadAll(io.LimitReader(resp.Body, 16<<10)) // EC2's user data is at most 16 KiB
		case http.StatusNotFound:
			return nil, nil
		default:
			return nil, fmt.Errorf("IMDS %s: %s", path, resp.Status)
		}
	}
	sd := seed{source: "imds"}
	if sd.userData, err = get("/latest/user-data"); err != nil {
		return sd, false, err
	}
	id, err := get("/latest/meta-data/instance-id")
	if err != nil {
		return sd, false, err
	}
	sd.hostname = strings.TrimSpace(string(id))
	return sd, true, nil
}
