package lbsynctest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/store"
)

// ServeInRegions makes each region's network (latency by region) and serves, on the host's bridge
// address of each, an HTTP server answering body(region): the target a region's router reaches as
// it reaches the region's instances. It returns each region's address and the port they share.
func ServeInRegions(t *testing.T, p *local.Provider, latency map[string]string, body func(region string) string) (map[string]string, int) {
	t.Helper()
	port := 0
	addrs := map[string]string{}
	for region, l := range latency {
		rn, err := p.Lab().EnsureNetwork(context.Background(), region, map[string]string{"latency": l})
		if err != nil {
			t.Fatal(err)
		}
		host := rn.Subnet.Addr().Next().String() // the bridge's .1
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		addrs[region] = host
		answer := body(region)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, answer) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return addrs, port
}

// PutReadyInstances stores a Ready instance web-<region> of fleet web in each region, at its
// address.
func PutReadyInstances(t *testing.T, st store.Store, addrs map[string]string) {
	t.Helper()
	for region, addr := range addrs {
		Put(t, st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-" + region},
			Spec:   v1alpha1.InstanceSpec{Fleet: "web", Revision: "web-1", Region: region, Provider: local.Name},
			Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady, Address: addr}})
	}
}

// Get returns the body of url, or an error for a status other than 200.
func Get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), nil
}
