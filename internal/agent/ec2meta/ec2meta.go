// Package ec2meta is what herd's agent reads on an EC2 instance: its identity from the instance
// metadata service, IMDSv2 only (a session token taken with PUT /latest/api/token and sent with
// every GET; the insecure IMDSv1 fallback is off), its bootstrap from the instance's user data,
// and spot interruption notices.
//
// The bootstrap is what herd's aws provider writes in the user data at RunInstances: the
// instance's name, where herd up is, the instance's credential (internal/agentauth) and the
// digest of the node image bundle to boot, which the AMI holds.
package ec2meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// BootstrapVersion is the version of the bootstrap this herd writes and reads.
const BootstrapVersion = 1

// Bootstrap is an instance's user data, as herd's aws provider writes it (JSON).
type Bootstrap struct {
	Version int `json:"version"`
	// Name is the instance's name, also its node name.
	Name string `json:"name"`
	// HerdUp is the URL of herd up's API.
	HerdUp string `json:"herdUp"`
	// Credential is the instance's credential: the agent's port answers only requests that carry it.
	Credential string `json:"credential"`
	// Image is the digest of the node image bundle to boot.
	Image string `json:"image"`
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Encode returns the bootstrap as user data.
func (b Bootstrap) Encode() []byte {
	b.Version = BootstrapVersion
	out, _ := json.Marshal(b) // strings only: never fails
	return out
}

// ParseBootstrap reads user data written by Encode, naming what is wrong with it.
func ParseBootstrap(data []byte) (Bootstrap, error) {
	var b Bootstrap
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("user data is not herd's bootstrap (JSON written by herd's aws provider): %w", err)
	}
	var errs []error
	if b.Version != BootstrapVersion {
		errs = append(errs, fmt.Errorf("version %d: this agent reads version %d: launch the instance from an AMI of the same herd as herd up", b.Version, BootstrapVersion))
	}
	if b.Name == "" {
		errs = append(errs, errors.New("name is missing"))
	}
	if u, err := url.Parse(b.HerdUp); b.HerdUp != "" && (err != nil || u.Host == "") {
		errs = append(errs, fmt.Errorf("herdUp %q is not a URL", b.HerdUp))
	}
	if b.Credential == "" {
		errs = append(errs, errors.New("credential is missing"))
	}
	if !digestRE.MatchString(b.Image) {
		errs = append(errs, fmt.Errorf("image %q is not a bundle digest (sha256:<64 hex>)", b.Image))
	}
	if err := errors.Join(errs...); err != nil {
		return b, fmt.Errorf("user data: %w", err)
	}
	return b, nil
}

// Identity is what the instance metadata says of this instance.
type Identity struct {
	InstanceID       string
	LocalIPv4        netip.Addr
	AvailabilityZone string
	Region           string
	Bootstrap        Bootstrap
}

// Notice is a spot interruption notice: EC2 will stop or terminate the instance at Time.
type Notice struct {
	Action string    `json:"action"` // "terminate", "stop" or "hibernate"
	Time   time.Time `json:"time"`
}

// Client reads the instance metadata service with IMDSv2 only.
type Client struct{ c *imds.Client }

// New returns a client of the metadata service at endpoint ("" for EC2's own, 169.254.169.254).
func New(endpoint string) *Client {
	return &Client{c: imds.New(imds.Options{Endpoint: endpoint, EnableFallback: aws.FalseTernary})}
}

// Identity reads the instance's identity and its bootstrap.
func (c *Client) Identity(ctx context.Context) (Identity, error) {
	var id Identity
	get := func(path string) (string, error) {
		out, err := c.c.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
		if err != nil {
			return "", fmt.Errorf("instance metadata %s: %w", path, err)
		}
		defer out.Content.Close()
		b, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
		return strings.TrimSpace(string(b)), err
	}
	var err error
	if id.InstanceID, err = get("instance-id"); err != nil {
		return id, err
	}
	ip, err := get("local-ipv4")
	if err != nil {
		return id, err
	}
	if id.LocalIPv4, err = netip.ParseAddr(ip); err != nil {
		return id, fmt.Errorf("instance metadata local-ipv4 %q: %w", ip, err)
	}
	if id.AvailabilityZone, err = get("placement/availability-zone"); err != nil {
		return id, err
	}
	if id.Region, err = get("placement/region"); err != nil {
		return id, err
	}
	out, err := c.c.GetUserData(ctx, &imds.GetUserDataInput{})
	if err != nil {
		return id, fmt.Errorf("instance user data: %w", err)
	}
	defer out.Content.Close()
	data, err := io.ReadAll(io.LimitReader(out.Content, 16<<10)) // EC2's limit on user data
	if err != nil {
		return id, fmt.Errorf("instance user data: %w", err)
	}
	id.Bootstrap, err = ParseBootstrap(data)
	return id, err
}

// Interruption returns the spot interruption notice, or nil when there is none (EC2 answers
// spot/instance-action with 404 until it decides to interrupt the instance).
func (c *Client) Interruption(ctx context.Context) (*Notice, error) {
	out, err := c.c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "spot/instance-action"})
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("instance metadata spot/instance-action: %w", err)
	}
	defer out.Content.Close()
	var n Notice
	if err := json.NewDecoder(io.LimitReader(out.Content, 4<<10)).Decode(&n); err != nil {
		return nil, fmt.Errorf("instance metadata spot/instance-action: %w", err)
	}
	return &n, nil
}

// WatchInterruption asks for an interruption notice every interval (EC2 gives two minutes'
// notice; AWS advises every 5 seconds) until ctx ends or a notice comes, and returns the notice.
// A failed ask is retried at the next interval: the metadata service is local and comes back.
func (c *Client) WatchInterruption(ctx context.Context, interval time.Duration, failed func(error)) (*Notice, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := c.Interruption(ctx)
		switch {
		case n != nil:
			return n, nil
		case err != nil && ctx.Err() == nil && failed != nil:
			failed(err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
