package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scheduler of a one-node cluster starts once that node is registered. A pod it tries before
// there is any node fails with "no nodes available", which it retries only after the back-off
// for errors (a second at least): the node's registration does not requeue it, as it requeues
// a pod a node's taint kept out. On a booting node the controller-manager's first pods came a
// tenth of a second before the kubelet's registration, and were bound more than a second after.
// Started once the node exists, the scheduler's first attempt finds it.

// flagValue returns the value of the flag name (--name=value or --name value) in args, or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// waitNode polls, every nodePoll, the API server that kubeconfig names (the scheduler's, which
// may read nodes) until the node exists or the API server refuses the credentials (see poll).
func waitNode(ctx context.Context, kubeconfig, node string, done chan result) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return fmt.Errorf("kube-scheduler's --kubeconfig: %w", err)
	}
	return poll(ctx, nodePoll, done, "node "+node+" was registered", func() (bool, error) {
		_, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{ResourceVersion: "0"})
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return false, fmt.Errorf("looking for node %s: %w", node, err)
		}
		// Any other error is retried: the node not registered yet, or the API server busy.
		return err == nil, nil
	})
}

// nodePoll is how often waitNode looks for the node: a GET the API server answers from its watch
// cache (resourceVersion 0), a few times during the kubelet's start.
const nodePoll = 50 * time.Millisecond
