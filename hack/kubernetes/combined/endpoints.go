// The Endpoints of a Service whose server is a component of this process, not a pod.

package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// publisher keeps the Endpoints of one Service saying address:port, as the endpoints controller
// does for a Service whose pods serve it. It waits for the Service, which the add-on's manifests
// make, and takes the port's name from it (the aggregation layer matches the two by name). It
// watches both objects, so that it writes again when either changes: the endpoints controller
// deletes the Endpoints of a Service it finds missing, which it may when it starts before the
// Service is made.
type publisher struct {
	client    kubernetes.Interface
	namespace string
	name      string
	address   string
	port      int32
}

// publisherClient makes a client of the API server kubeconfig names, for watches as well as
// requests (so no client-wide timeout).
func publisherClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%s: --kubeconfig: %w", serviceFlag, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// run keeps the Endpoints until ctx ends, retrying a failed write with back-off.
func (p *publisher) run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(p.client, 12*time.Hour,
		informers.WithNamespace(p.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.name).String()
		}))
	services := factory.Core().V1().Services()
	endpoints := factory.Core().V1().Endpoints()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	key := p.namespace + "/" + p.name
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { queue.Add(key) },
		UpdateFunc: func(any, any) { queue.Add(key) },
		DeleteFunc: func(any) { queue.Add(key) },
	}
	for _, inf := range []cache.SharedIndexInformer{services.Informer(), endpoints.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			klog.ErrorS(err, "Cannot watch", "service", key)
			return
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), services.Informer().HasSynced, endpoints.Informer().HasSynced) {
		return
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		k, quit := queue.Get()
		if quit {
			return
		}
		svc, _ := services.Lister().Services(p.namespace).Get(p.name)
		cur, _ := endpoints.Lister().Endpoints(p.namespace).Get(p.name)
		if err := p.sync(ctx, svc, cur); err != nil {
			klog.ErrorS(err, "Cannot write the Endpoints; retrying", "service", key)
			queue.AddRateLimited(k)
		} else {
			queue.Forget(k)
		}
		queue.Done(k)
	}
}

// sync makes the Endpoints of svc (nil: not made yet, nothing to do) what they should be, given
// the current ones (nil: none).
func (p *publisher) sync(ctx context.Context, svc *corev1.Service, cur *corev1.Endpoints) error {
	if svc == nil {
		return nil
	}
	want, err := p.endpoints(svc)
	if err != nil {
		return err
	}
	switch {
	case cur == nil:
		_, err = p.client.CoreV1().Endpoints(p.namespace).Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // the watch brings it, and another sync
		}
	case !apiequality.Semantic.DeepEqual(cur.Subsets, want.Subsets):
		up := cur.DeepCopy()
		up.Subsets = want.Subsets
		_, err = p.client.CoreV1().Endpoints(p.namespace).Update(ctx, up, metav1.UpdateOptions{})
	default:
		return nil
	}
	if err != nil {
		return err
	}
	klog.InfoS("Wrote the Endpoints", "service", p.namespace+"/"+p.name, "address", p.address, "port", p.port)
	return nil
}

// endpoints are the Endpoints svc should have: this process's address and port, named as svc's
// only port.
func (p *publisher) endpoints(svc *corev1.Service) (*corev1.Endpoints, error) {
	if len(svc.Spec.Selector) != 0 {
		return nil, fmt.Errorf("service %s/%s has a selector, so the endpoints controller keeps its Endpoints: remove spec.selector", p.namespace, p.name)
	}
	if len(svc.Spec.Ports) != 1 {
		return nil, fmt.Errorf("service %s/%s has %d ports: want one, served at %s:%d", p.namespace, p.name, len(svc.Spec.Ports), p.address, p.port)
	}
	sp := svc.Spec.Ports[0]
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Labels: svc.Labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: p.address}},
			Ports:     []corev1.EndpointPort{{Name: sp.Name, Port: p.port, Protocol: corev1.ProtocolTCP}},
		}},
	}, nil
}
