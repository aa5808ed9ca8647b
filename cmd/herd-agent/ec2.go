package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agent/ec2meta"
)

// ec2Flags are the flags of an agent on EC2.
type ec2Flags struct {
	on        bool
	endpoint  string // the metadata service; "" for EC2's own
	imagesDir string // where the AMI holds the node image bundles
}

// interruptionPoll is how often a spot instance's agent asks for an interruption notice, as AWS
// advises: EC2 gives two minutes' notice.
const interruptionPoll = 5 * time.Second

// fromEC2 fills in what the agent is told from the instance metadata (IMDSv2) and its user data:
// the instance's name, its private address, its credential and the bundle to boot, which the AMI
// holds in imagesDir.
func (f ec2Flags) fromEC2(ctx context.Context, cfg *agent.Config) (*ec2meta.Client, error) {
	md := ec2meta.New(f.endpoint)
	id, err := md.Identity(ctx)
	if err != nil {
		return nil, fmt.Errorf("--ec2: %w", err)
	}
	cfg.Name, cfg.Address, cfg.Credential = id.Bootstrap.Name, id.LocalIPv4, id.Bootstrap.Credential
	cfg.BundleDir = filepath.Join(f.imagesDir, "bundles", strings.TrimPrefix(id.Bootstrap.Image, "sha256:"))
	return md, nil
}

// stopOnInterruption ends the agent's run, gracefully, when EC2 gives the instance a spot
// interruption notice: the instance leaves the load balancers before EC2 takes it, and its
// /readyz says why, so that herd launches its replacement at once.
func stopOnInterruption(ctx context.Context, md *ec2meta.Client, stop context.CancelCauseFunc, log *slog.Logger) {
	n, err := md.WatchInterruption(ctx, interruptionPoll, func(err error) {
		log.Warn("asking for a spot interruption notice", "err", err)
	})
	if err != nil {
		return
	}
	log.Warn("spot interruption notice: stopping", "action", n.Action, "at", n.Time)
	stop(fmt.Errorf("spot interruption notice: EC2 will %s the instance at %s", n.Action, n.Time.UTC().Format(time.RFC3339)))
}
