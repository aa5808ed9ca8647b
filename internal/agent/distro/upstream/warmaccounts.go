// The service accounts a warm store holds: those a new node's controllers would make as they
// start, none of which names the node.

package upstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"herd.dev/herd/internal/agent/distro"
)

// controllerBindingPrefix names the bootstrap policy's bindings of kube-controller-manager's
// controllers, each to the service account that controller's client acts as.
const controllerBindingPrefix = "system:controller:"

// writeServiceAccounts writes, through the API server at server, the service accounts that
// kube-controller-manager makes as it starts on a new node:
//   - each namespace's "default", made by the service account controller once its informers
//     have synced: a pod created before that waits in admission (the ServiceAccount plugin looks
//     the account up again every 100-200 ms) and its ReplicaSet's create with it;
//   - with --use-service-account-credentials, one per controller in kube-system, made (a write
//     each) as each controller is built, one after the other, before any informer starts: the
//     subjects of the bootstrap policy's system:controller:* bindings and role bindings.
//
// Service accounts hold no token and name no node; the CA bundle their pods mount
// (kube-root-ca.crt) names the node's CA and is not written here.
func writeServiceAccounts(ctx context.Context, server string, adm distro.Access) error {
	cs, err := kubernetes.NewForConfig(&rest.Config{
		Host:            server,
		BearerToken:     adm.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: adm.CAPEM},
		QPS:             -1, // no client-side rate limit: a hundred writes, once, at image build
	})
	if err != nil {
		return fmt.Errorf("warm store: %w", err)
	}
	accounts, err := serviceAccountsToWrite(ctx, cs)
	if err != nil {
		return fmt.Errorf("warm store: %w", err)
	}
	for _, a := range accounts {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Name}}
		if _, err := cs.CoreV1().ServiceAccounts(a.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("warm store: service account %s: %w", a, err)
		}
	}
	return nil
}

// serviceAccountsToWrite lists the service accounts writeServiceAccounts writes, sorted.
func serviceAccountsToWrite(ctx context.Context, cs kubernetes.Interface) ([]types.NamespacedName, error) {
	var out []types.NamespacedName
	add := func(namespace, name string) {
		n := types.NamespacedName{Namespace: namespace, Name: name}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ns := range nss.Items {
		add(ns.Name, "default")
	}
	// A role binding's service account subject may leave out its namespace: the binding's.
	addSubjects := func(meta metav1.ObjectMeta, subjects []rbacv1.Subject) {
		if !strings.HasPrefix(meta.Name, controllerBindingPrefix) {
			return
		}
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				add(cmp.Or(s.Namespace, meta.Namespace), s.Name)
			}
		}
	}
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range crbs.Items {
		addSubjects(b.ObjectMeta, b.Subjects)
	}
	rbs, err := cs.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range rbs.Items {
		addSubjects(b.ObjectMeta, b.Subjects)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}
