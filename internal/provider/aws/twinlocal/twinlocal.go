// Package twinlocal runs the EC2 twin's instances (internal/provider/aws/awstwin) as real local
// instances, so that a test of herd on EC2 ends in a real one-node Kubernetes answering through
// herd's load balancer. At RunInstances it boots, with the local provider (internal/provider/local,
// with its region networks from internal/netlab), an instance from the node image bundle its
// AMI's herd.dev/image tag names, whose agent runs as on EC2 (herd-agent --ec2): it reads its
// identity from the twin's instance metadata service (IMDSv2) and its bootstrap from the user
// data given to RunInstances, and serves at the private address the local provider gave it,
// which the twin reports. A termination, by TerminateInstances or from outside, deletes it.
//
// Each instance reaches its metadata service at its region's gateway (the host's address on the
// region's bridge), on a port where the backend answers as EC2's metadata service answers at
// 169.254.169.254: it tells the instance by the request's source address, its private address,
// and hands the request to that instance's metadata service in the twin.
package twinlocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws/awstwin"
	"herd.dev/herd/internal/provider/local"
)

// ImageTag is the AMI tag that names the node image bundle an instance boots, the one herd's aws
// provider finds an image's AMI by.
const ImageTag = "herd.dev/image"

// Bounds of the local provider's work for one instance.
const (
	launchTimeout = 2 * time.Minute
	deleteTimeout = 2 * time.Minute
)

// Options configure a backend.
type Options struct {
	// DataDir is the data directory of the local provider that runs the instances (their records
	// and the regions' networks): EC2's hosts, apart from herd up's. Required.
	DataDir string
	// ImagesDir is the node image store that holds the AMIs' bundles, what an AMI's disk holds.
	// Default: the data directory's.
	ImagesDir string
	// HerdBinary is the herd executable the local provider runs its helpers with; the instances'
	// agent is the herd-agent beside it. Required.
	HerdBinary string
	// Logger receives the backend's and the local provider's logs. Default: discard.
	Logger *slog.Logger
	// Twin configures the twin; its Backend is this one.
	Twin awstwin.Options
}

// Backend is an awstwin.Backend whose instances are real local instances.
type Backend struct {
	tw    *awstwin.Twin
	local *local.Provider
	log   *slog.Logger
	md    *http.Server
	proxy http.RoundTripper // to the twin's metadata services

	mu          sync.Mutex
	closed      bool
	terminating sync.WaitGroup
	closeOnce   sync.Once
	closeErr    error
}

var _ awstwin.Backend = (*Backend)(nil)

// Start starts a twin whose instances the backend runs, and the metadata service they reach.
// When the test ends, the backend deletes every instance it still runs, then the twin stops.
func Start(t interface{ Cleanup(func()) }, opts Options) (*Backend, error) {
	if opts.DataDir == "" || opts.HerdBinary == "" {
		return nil, errors.New("twinlocal: DataDir and HerdBinary are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// Every address of the host: the regions' gateways come and go with their bridges, and the
	// handler answers only the twin's instances.
	ln, err := net.Listen("tcp4", ":0")
	if err != nil {
		return nil, fmt.Errorf("twinlocal: metadata service: %w", err)
	}
	lp, err := local.New(local.Options{
		DataDir: opts.DataDir, ImagesDir: opts.ImagesDir, HerdBinary: opts.HerdBinary, Logger: opts.Logger,
		EC2MetadataPort: ln.Addr().(*net.TCPAddr).Port,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("twinlocal: %w", err)
	}
	b := &Backend{
		local: lp, log: opts.Logger.With("component", "twinlocal"),
		proxy: &http.Transport{Proxy: nil},
	}
	opts.Twin.Backend = b
	b.tw = awstwin.New(t, opts.Twin)
	b.md = &http.Server{Handler: http.HandlerFunc(b.serveMetadata), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.md.Serve(ln) }()
	// Registered after the twin's own cleanups, so run before them.
	t.Cleanup(func() { _ = b.Close() })
	return b, nil
}

// Twin returns the twin whose instances the backend runs.
func (b *Backend) Twin() *awstwin.Twin { return b.tw }

// Local returns the local provider that runs the instances, each named by its instance ID and
// placed in a region named as the instance's EC2 region.
func (b *Backend) Local() *local.Provider { return b.local }

// Launch implements awstwin.Backend: it creates the local instance named by in's ID, in a region
// named as in's, booting the bundle image's tag names, and returns its address.
func (b *Backend) Launch(in awstwin.Instance, image awstwin.Image) (string, error) {
	digest := image.Tags[ImageTag]
	if digest == "" {
		return "", fmt.Errorf("AMI %s has no %s tag: it names no node image bundle to boot", image.ID, ImageTag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), launchTimeout)
	defer cancel()
	li, err := b.local.Create(ctx, provider.InstanceSpec{Name: in.ID, Region: in.Region, Image: digest})
	if err != nil {
		return "", err
	}
	b.log.Info("instance launched", "instance", in.ID, "address", li.Address, "image", digest)
	return li.Address, nil
}

// Terminate implements awstwin.Backend: it deletes the local instance, its agent stopped
// gracefully first as an EC2 instance's shutdown stops its services.
func (b *Backend) Terminate(in awstwin.Instance) {
	b.mu.Lock()
	if !b.closed {
		b.terminating.Add(1)
		defer b.terminating.Done()
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	if err := b.local.Delete(ctx, in.ID); err != nil {
		b.log.Error("terminate an instance", "instance", in.ID, "err", err)
		return
	}
	b.log.Info("instance terminated", "instance", in.ID)
}

// Close waits for the terminations under way, deletes every instance the backend still runs
// (what the twin still reports running included: a test that ended early leaves nothing) and
// the regions' networks, and stops the metadata service.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.terminating.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*deleteTimeout)
		defer cancel()
		var errs []error
		left, err := b.local.List(ctx, provider.ListOptions{})
		errs = append(errs, err)
		for _, in := range left {
			errs = append(errs, b.local.Delete(ctx, in.Name))
		}
		errs = append(errs, b.local.KeepRegions(ctx, nil), b.md.Close())
		if err := errors.Join(errs...); err != nil {
			b.closeErr = fmt.Errorf("twinlocal: %w", err)
		}
	})
	return b.closeErr
}

// serveMetadata hands an instance's request to its metadata service in the twin.
func (b *Backend) serveMetadata(w http.ResponseWriter, r *http.Request) {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := b.instanceAt(addr)
	endpoint := b.tw.MetadataURL(id)
	if id == "" || endpoint == "" {
		http.Error(w, "no instance of the twin has the address "+addr, http.StatusNotFound)
		return
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: b.proxy}
	proxy.ServeHTTP(w, r)
}

// instanceAt returns the ID of the twin's instance at a private address, the latest launched
// if several were (a terminated instance's address is given out again), or "". The twin's
// lock is held while it launches an instance, whose agent may ask before the launch is done:
// asking the twin waits for the launch, and so finds the instance.
func (b *Backend) instanceAt(addr string) string {
	id := ""
	for _, in := range b.tw.Instances() {
		if in.PrivateIP == addr {
			id = in.ID
		}
	}
	return id
}
