package main

import (
	"context"
	"fmt"
	"time"

	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

// startEtcd starts a 3-member etcd cluster of the machine's etcd (Debian's, installed by
// hack/install-deps.sh) on loopback under dir and returns a store on it and a function that stops
// the cluster. The cluster keeps etcd's default --max-txn-ops (128): the controller writes a
// fleet's records in transactions within the store's limit.
func startEtcd(dir string, perFleet int) (*etcd.Store, func()) {
	ctx := context.Background()
	begin := time.Now()
	c, err := etcdcluster.Start(ctx, etcdcluster.Config{Dir: dir, DieWithParent: true})
	check(err)
	fmt.Printf("etcd: cluster of %d members healthy in %.1fs (max-txn-ops %d, %d instances per fleet)\n",
		len(c.Members), time.Since(begin).Seconds(), etcd.DefaultMaxTxnOps, perFleet)
	st, err := etcd.New(ctx, etcd.Config{Endpoints: c.Endpoints()})
	if err != nil {
		_ = c.Stop()
		check(err)
	}
	return st, func() { check(c.Stop()) }
}
