package aws

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agent/ec2meta"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider"
)

// agentTimeout bounds one ask of an agent's readiness.
const agentTimeout = 2 * time.Second

// agentStopping starts what an agent's /readyz answers once it stops (internal/agent).
const agentStopping = "stopping"

// userData is the instance's bootstrap (internal/agent/ec2meta), base64 as RunInstances takes it,
// with herd up's URL from the region's herdUp option (else Options.HerdUp):
// the same for every ask of one name, so that the ClientToken's parameters do not change.
func (p *Provider) userData(spec provider.InstanceSpec, o regionOptions) *string {
	if p.opts.AgentKeys == nil {
		return nil
	}
	herdUp := o.herdUp
	if herdUp == "" {
		herdUp = p.opts.HerdUp
	}
	b := ec2meta.Bootstrap{Name: spec.Name, HerdUp: herdUp, Credential: p.opts.AgentKeys.Credential(spec.Name), Image: spec.Image}
	s := base64.StdEncoding.EncodeToString(b.Encode())
	return &s
}

// agentReadiness turns the running instances' state into what their agents say, asked with
// each instance's credential at its private address: Ready once the agent is, Booting before
// (the agent booting or not answering yet), Failed when the agent says the instance failed,
// Deleting when the agent stops (askAgent).
// Without AgentKeys instances run no agent of herd's, and running is Ready.
func (p *Provider) agentReadiness(ctx context.Context, ins []provider.Instance) {
	if p.opts.AgentKeys == nil {
		return
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range ins {
		if ins[i].State != provider.StateReady {
			continue
		}
		g.Go(func() error {
			ins[i].State, ins[i].Reason = p.askAgent(ctx, ins[i])
			return nil
		})
	}
	_ = g.Wait()
}

// askAgent asks an instance's agent for its readiness: Ready, Booting (with why), Failed (with
// the agent's reason) or Deleting: an agent that stops (on a spot interruption notice, or a
// shutdown from outside) says the instance is going, and the controller then launches its
// replacement at once, before EC2 takes it.
func (p *Provider) askAgent(ctx context.Context, in provider.Instance) (provider.State, string) {
	if in.Address == "" {
		return provider.StateBooting, "EC2 gave the instance no private address yet"
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(in.Address, strconv.Itoa(agent.DefaultPort)) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return provider.StateBooting, err.Error()
	}
	verify := agentauth.Authorize(req, p.opts.AgentKeys.Credential(in.Name))
	resp, err := p.agents.Do(req)
	if err != nil {
		return provider.StateBooting, "the agent does not answer yet: " + err.Error()
	}
	defer resp.Body.Close()
	if err := verify(resp); err != nil {
		return provider.StateBooting, fmt.Sprintf("%s at %s: %v", in.Name, in.Address, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	reason := strings.TrimSpace(string(body))
	switch {
	case resp.StatusCode == http.StatusOK:
		return provider.StateReady, ""
	case strings.HasPrefix(reason, "failed: "):
		return provider.StateFailed, "the instance's agent: " + strings.TrimPrefix(reason, "failed: ")
	case strings.HasPrefix(reason, agentStopping):
		return provider.StateDeleting, "the instance is going: its agent is " + reason
	}
	return provider.StateBooting, "the agent: " + reason
}
