package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// afterNode are the components of a one-node cluster that start once that node is registered,
// when the kubelet runs in this process and names its node:
//   - kube-scheduler: a pod it tries before there is any node fails with "no nodes available",
//     which it retries only after the back-off for errors (a second at least): the node's
//     registration does not requeue it, as it requeues a pod a node's taint kept out. On a
//     booting node the controller-manager's first pods came a tenth of a second before the
//     kubelet's registration, and were bound more than a second after.
//   - kube-proxy: it reads its node's addresses before anything else, and asks again one
//     second after a miss (then 2, 4, ... s later). Started with the kubelet, it asked before
//     the node was registered in every boot measured, and its informers synced (its first rules,
//     which a Service's first answer waits for, follow) 1.43-1.48 s after its start.
//
// Started once the node exists, each finds it at its first try.
var afterNode = []string{"kube-scheduler", "kube-proxy"}

// nodeToWaitFor returns, from the kubelet's flags, the node the components of afterNode wait for
// (--hostname-override) and the kubeconfig to look for it with: the kubelet's own, whose node
// identity may read nodes (the Node authorizer). Both are "" when the kubelet does not name them.
func nodeToWaitFor(kubelet group) (node, kubeconfig string) {
	node, kubeconfig = flagValue(kubelet.args, "--hostname-override"), flagValue(kubelet.args, "--kubeconfig")
	if node == "" || kubeconfig == "" {
		return "", ""
	}
	return node, kubeconfig
}

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

// waitNode polls, every nodePoll, the API server that kubeconfig names until the node exists or
// the API server refuses the credentials (see poll).
func waitNode(ctx context.Context, kubeconfig, node string, done chan result) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", kubeconfig, err)
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
