package etcdcluster

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// StartTest starts a 3-member cluster for a test, with args added to every member's command
// line, and stops it when the test ends. It skips the test under -short and when no etcd server
// is installed.
func StartTest(t testing.TB, args ...string) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	bin, err := FindBinary()
	if err != nil {
		t.Skip(err)
	}
	start := time.Now()
	c, err := Start(context.Background(), Config{Dir: t.TempDir(), Binary: bin, Args: args, DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the etcd cluster: %v", err)
		}
	})
	t.Logf("etcd cluster of %d members (%s) healthy in %s", len(c.Members), bin, time.Since(start).Round(time.Millisecond))
	return c
}

// Client returns a plain etcd client on c for a test, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
