// Command etcd-cluster starts and stops a 3-member etcd cluster on loopback for development and
// tests of herd's etcd store; hack/etcd-cluster.sh runs it.
//
//	etcd-cluster start DIR   start the members (data and logs under DIR), wait until healthy,
//	                         print the client endpoints (comma-separated, for --etcd-endpoints)
//	etcd-cluster stop DIR    stop the members recorded in DIR/cluster.json; DIR is kept
//
// The members run with etcdcluster.FastElection (50 ms heartbeat, 500 ms election timeout), fit
// for loopback, so that herd up replicas on them can use --leader-lease-ttl 1.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

const usage = "usage: etcd-cluster start|stop DIR"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%s", usage)
	}
	dir := args[1]
	switch args[0] {
	case "start":
		c, err := etcdcluster.Start(context.Background(), etcdcluster.Config{Dir: dir, Args: etcdcluster.FastElection})
		if err != nil {
			return err
		}
		fmt.Println(strings.Join(c.Endpoints(), ","))
		return nil
	case "stop":
		c, err := etcdcluster.Load(dir)
		if err != nil {
			return err
		}
		return c.Stop()
	}
	return fmt.Errorf("unknown command %q: %s", args[0], usage)
}
