package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
)

// Client talks to one control plane, through any of its replicas (Config.Endpoints): it sends
// each request to the replica that answered last, and moves on to the next one when a replica
// cannot be reached (the request never left, so any request may go elsewhere), or, for the
// idempotent methods (GET, PUT, DELETE), when it fails on the way or answers 503.
type Client struct {
	cfg  Config
	http *http.Client
	// current is the index in cfg.Endpoints() of the replica that answered last.
	current *atomic.Int64
}

// New returns a client for cfg.
func New(cfg *Config) *Client {
	return &Client{cfg: *cfg, http: &http.Client{Transport: transport, Timeout: 30 * time.Second}, current: new(atomic.Int64)}
}

// APIError is a refusal from the API, with the field problems when validation failed.
type APIError struct {
	Code   int
	Body   apiserver.ErrorBody
	Server string
}

func (e *APIError) Error() string {
	if e.Code == http.StatusUnauthorized {
		return fmt.Sprintf("the control plane at %s refused the token (401): the client config is from another `herd up`; restart it or use its config", e.Server)
	}
	if len(e.Body.Fields) == 0 {
		return e.Body.Error
	}
	lines := make([]string, 0, len(e.Body.Fields))
	for _, f := range e.Body.Fields {
		lines = append(lines, f.Field+": "+f.Message)
	}
	return strings.Join(lines, "\n")
}

// IsUnavailable reports whether err is the API's 503: the control plane's store cannot answer
// (etcd without quorum), and a retry later will do.
func IsUnavailable(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusServiceUnavailable
}

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var data []byte
	if in != nil {
		var err error
		if data, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	eps := c.cfg.Endpoints()
	first := int(c.current.Load())
	var err, answered error
	for i := range eps {
		n := (first + i) % len(eps)
		var resp *http.Response
		resp, err = c.sendTo(ctx, eps[n], method, path, data)
		if err == nil {
			c.current.Store(int64(n))
			return resp, nil
		}
		if ctx.Err() != nil || !failover(method, err) {
			return nil, err
		}
		if _, ok := err.(*APIError); ok {
			answered = err
		}
	}
	// When every replica failed, what one of them answered (503: etcd has no quorum) says more
	// than another's connection refused.
	if answered != nil {
		return nil, answered
	}
	return nil, err
}

// failover reports whether a request that failed with err may be sent to another replica: when
// it never reached this one, or when it is idempotent and failed on the way or met a replica
// that cannot serve (503: its store has no quorum, or it is stopping).
func failover(method string, err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code == http.StatusServiceUnavailable
	}
	return true // a transport failure after the request left: safe to repeat
}

// sendTo sends one request to the replica at server.
func (c *Client) sendTo(ctx context.Context, server, method, path string, data []byte) (*http.Response, error) {
	var body io.Reader
	if data != nil {
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL(server)+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("cannot reach the herd control plane at %s (connection refused): is it running? Start it with `herd up`: %w", server, err)
		}
		return nil, fmt.Errorf("cannot reach the herd control plane at %s: %w", server, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		ae := &APIError{Code: resp.StatusCode, Server: server}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &ae.Body) != nil || ae.Body.Error == "" {
			ae.Body.Error = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return nil, ae
	}
	return resp, nil
}

// Version returns the control plane's version.
func (c *Client) Version(ctx context.Context) (string, error) {
	var v map[string]string
	err := c.do(ctx, http.MethodGet, "/v1/version", nil, &v)
	return v["version"], err
}

// Status returns the control plane's component health.
func (c *Client) Status(ctx context.Context) (map[string]string, error) {
	var v map[string]string
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &v)
	return v, err
}

// Apply stores fleets, all or none.
func (c *Client) Apply(ctx context.Context, fleets []v1alpha1.Fleet) ([]apiserver.ApplyResult, error) {
	var out []apiserver.ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/apply", apiserver.ApplyRequest{Fleets: fleets}, &out)
	return out, err
}

// ListFleets returns every fleet.
func (c *Client) ListFleets(ctx context.Context) ([]v1alpha1.Fleet, error) {
	var out []v1alpha1.Fleet
	err := c.do(ctx, http.MethodGet, "/v1/fleets", nil, &out)
	return out, err
}

// GetFleet returns one fleet.
func (c *Client) GetFleet(ctx context.Context, name string) (*v1alpha1.Fleet, error) {
	var out v1alpha1.Fleet
	if err := c.do(ctx, http.MethodGet, "/v1/fleets/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Scale sets a fleet's desired count.
func (c *Client) Scale(ctx context.Context, name string, replicas int32) error {
	return c.do(ctx, http.MethodPut, "/v1/fleets/"+url.PathEscape(name)+"/scale", apiserver.ScaleRequest{Replicas: replicas}, nil)
}

// DeleteFleet deletes a fleet; the controller then deletes its instances.
func (c *Client) DeleteFleet(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/fleets/"+url.PathEscape(name), nil, nil)
}

// ListInstances returns the instances of one fleet, or of all when fleet is "".
func (c *Client) ListInstances(ctx context.Context, fleet string) ([]v1alpha1.Instance, error) {
	var out []v1alpha1.Instance
	err := c.do(ctx, http.MethodGet, "/v1/instances?fleet="+url.QueryEscape(fleet), nil, &out)
	return out, err
}

// ListEvents returns events about object ("" for all), oldest first, at most limit (0: all).
func (c *Client) ListEvents(ctx context.Context, object string, limit int) ([]v1alpha1.Event, error) {
	var out []v1alpha1.Event
	q := url.Values{"object": {object}}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &out)
	return out, err
}

// WatchEvents calls fn for each listed event, then for each new one, until ctx ends.
func (c *Client) WatchEvents(ctx context.Context, object string, limit int, fn func(v1alpha1.Event)) error {
	q := url.Values{"object": {object}, "watch": {"true"}}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	err := c.stream(ctx, "/v1/events?"+q.Encode(), func(line []byte) bool {
		var e v1alpha1.Event
		if json.Unmarshal(line, &e) == nil {
			fn(e)
		}
		return false
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ErrWatchEnded means a watch stream ended before the caller was done: watch again.
var ErrWatchEnded = errors.New("watch ended")

// WatchFleet calls fn with the fleet as it is, then after each change to it, until fn reports it
// is done (WatchFleet returns nil), the fleet is deleted (fn's last event is WatchDeleted, then
// ErrWatchEnded unless fn was done), the stream ends (ErrWatchEnded: watch again) or ctx ends
// (ctx's error). A missing fleet is the API's 404 (IsNotFound).
func (c *Client) WatchFleet(ctx context.Context, name string, fn func(apiserver.FleetEvent) (done bool)) error {
	var bad error
	done := false
	err := c.stream(ctx, "/v1/fleets/"+url.PathEscape(name)+"?watch=true", func(line []byte) bool {
		var ev apiserver.FleetEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.Fleet == nil {
			bad = fmt.Errorf("watch of fleet %s: unreadable event %q", name, line)
			return true
		}
		done = fn(ev)
		return done
	})
	switch {
	case bad != nil:
		return bad
	case done:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return err
	}
	return ErrWatchEnded
}

// stream GETs path, a stream of JSON lines, and calls fn with each line until fn reports it is
// done, the stream ends or ctx ends.
func (c *Client) stream(ctx context.Context, path string, fn func(line []byte) (done bool)) error {
	streaming := &Client{cfg: c.cfg, http: &http.Client{Transport: transport}, current: c.current} // no overall timeout on a stream
	resp, err := streaming.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if fn(sc.Bytes()) {
			return nil
		}
	}
	return sc.Err()
}

// UndoRollout sends a fleet back to the revision that served before the current one.
func (c *Client) UndoRollout(ctx context.Context, name string) (*v1alpha1.Fleet, error) {
	return c.rolloutCommand(ctx, name, "undo")
}

// RestartRollout resolves the fleet's spec.image again and rolls out what it names now, if that
// is not the pinned image.
func (c *Client) RestartRollout(ctx context.Context, name string) (*apiserver.RestartResult, error) {
	var res apiserver.RestartResult
	if err := c.do(ctx, http.MethodPost, "/v1/fleets/"+url.PathEscape(name)+"/rollout/restart", nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Images lists herd up's node image bundles and the fleets that use each.
func (c *Client) Images(ctx context.Context) ([]apiserver.ImageInfo, error) {
	var out []apiserver.ImageInfo
	return out, c.do(ctx, http.MethodGet, "/v1/images", nil, &out)
}

// RemoveImage removes the bundle ref names (a NodeImage name or a digest), unless a fleet uses it.
func (c *Client) RemoveImage(ctx context.Context, ref string) (*apiserver.ImageInfo, error) {
	var out apiserver.ImageInfo
	if err := c.do(ctx, http.MethodDelete, "/v1/images/"+url.PathEscape(ref), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PruneImages removes every bundle no fleet uses, keeping those of the last keep entries of each
// fleet's rollout history.
func (c *Client) PruneImages(ctx context.Context, keep int) (*apiserver.PruneResult, error) {
	var out apiserver.PruneResult
	if err := c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/images/prune?keep=%d", keep), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PromoteRollout asks for the fleet's rollout in progress to skip its remaining steps and move all
// traffic to the new revision.
func (c *Client) PromoteRollout(ctx context.Context, name string) (*v1alpha1.Fleet, error) {
	return c.rolloutCommand(ctx, name, "promote")
}

// AbortRollout asks for the fleet's rollout in progress to be rolled back at once.
func (c *Client) AbortRollout(ctx context.Context, name string) (*v1alpha1.Fleet, error) {
	return c.rolloutCommand(ctx, name, "abort")
}

// PinTenant keeps one tenant of a fleet with tenancy on image (a NodeImage name or a digest; ""
// for the image the fleet boots now) while the others follow the fleet.
func (c *Client) PinTenant(ctx context.Context, fleet, tenant, image string) (*v1alpha1.Fleet, error) {
	var f v1alpha1.Fleet
	if err := c.do(ctx, http.MethodPut, tenantPinPath(fleet, tenant), apiserver.PinRequest{Image: image}, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// UnpinTenant lets a tenant follow its fleet's image again.
func (c *Client) UnpinTenant(ctx context.Context, fleet, tenant string) (*v1alpha1.Fleet, error) {
	var f v1alpha1.Fleet
	if err := c.do(ctx, http.MethodDelete, tenantPinPath(fleet, tenant), nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

func tenantPinPath(fleet, tenant string) string {
	return "/v1/fleets/" + url.PathEscape(fleet) + "/tenants/" + url.PathEscape(tenant) + "/pin"
}

// rolloutCommand posts /v1/fleets/NAME/rollout/CMD and returns the fleet as the API left it.
func (c *Client) rolloutCommand(ctx context.Context, name, cmd string) (*v1alpha1.Fleet, error) {
	var f v1alpha1.Fleet
	if err := c.do(ctx, http.MethodPost, "/v1/fleets/"+url.PathEscape(name)+"/rollout/"+cmd, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// StartChaos starts a chaos action (herd chaos).
func (c *Client) StartChaos(ctx context.Context, spec v1alpha1.ChaosActionSpec) (*v1alpha1.ChaosAction, error) {
	var out v1alpha1.ChaosAction
	err := c.do(ctx, http.MethodPost, "/v1/chaos", spec, &out)
	return &out, err
}

// ListChaos returns the chaos actions kept, newest first.
func (c *Client) ListChaos(ctx context.Context) ([]v1alpha1.ChaosAction, error) {
	var out []v1alpha1.ChaosAction
	err := c.do(ctx, http.MethodGet, "/v1/chaos", nil, &out)
	return out, err
}

// StopChaos undoes an active chaos action now.
func (c *Client) StopChaos(ctx context.Context, name string) (*v1alpha1.ChaosAction, error) {
	var out v1alpha1.ChaosAction
	err := c.do(ctx, http.MethodPost, "/v1/chaos/"+url.PathEscape(name)+"/stop", nil, &out)
	return &out, err
}

// RegionLBs returns the regional load balancers the control plane configures (none from a
// control plane that predates them).
func (c *Client) RegionLBs(ctx context.Context) ([]apiserver.RegionLB, error) {
	var out []apiserver.RegionLB
	err := c.do(ctx, http.MethodGet, "/v1/regions/loadbalancers", nil, &out)
	if IsNotFound(err) {
		return nil, nil
	}
	return out, err
}

// Orphans returns the instances the providers run that no fleet owns, as the controller's
// orphan collector last found them.
func (c *Client) Orphans(ctx context.Context) ([]v1alpha1.Orphan, error) {
	var out []v1alpha1.Orphan
	err := c.do(ctx, http.MethodGet, "/v1/orphans", nil, &out)
	return out, err
}

// ClientRTTs returns the round trip from each client network to each region, as the regions' load
// balancers measured it (none from a control plane that predates it).
func (c *Client) ClientRTTs(ctx context.Context) ([]apiserver.ClientRTT, error) {
	var out []apiserver.ClientRTT
	err := c.do(ctx, http.MethodGet, "/v1/rtt", nil, &out)
	if IsNotFound(err) {
		return nil, nil
	}
	return out, err
}

// FrontDoor returns the global front door the control plane configures (none from a control plane
// that predates it).
func (c *Client) FrontDoor(ctx context.Context) (*apiserver.FrontDoor, error) {
	var out apiserver.FrontDoor
	err := c.do(ctx, http.MethodGet, "/v1/front", nil, &out)
	if IsNotFound(err) {
		return &apiserver.FrontDoor{}, nil
	}
	return &out, err
}
