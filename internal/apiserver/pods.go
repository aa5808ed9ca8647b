// An instance's pods, as `kubectl get pods -A` shows them: GET /v1/instances/NAME/pods reads them
// from the instance's API server with herd's own credentials, for the dashboard's instance page.

package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"herd.dev/herd/api/v1alpha1"
)

// PodSummary is one pod of an instance.
type PodSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is the pod's phase: Pending, Running, Succeeded, Failed or Unknown.
	Phase string `json:"phase"`
	// Ready counts the ready containers, of Containers.
	Ready      int `json:"ready"`
	Containers int `json:"containers"`
	// Restarts sums its containers' restarts.
	Restarts  int32      `json:"restarts"`
	PodIP     string     `json:"podIP,omitempty"`
	StartTime *time.Time `json:"startTime,omitempty"`
}

func (s *Server) instancePods(w http.ResponseWriter, r *http.Request) {
	if _, _, pods, ok := s.instancePodList(w, r); ok {
		writeJSON(w, http.StatusOK, summarizePods(pods))
	}
}

// instancePodList reads the pods of the instance the request names from its API server, with
// the client it used, or answers why it cannot.
func (s *Server) instancePodList(w http.ResponseWriter, r *http.Request) (*v1alpha1.Instance, corev1client.CoreV1Interface, []corev1.Pod, bool) {
	in, ok := s.instance(w, r, r.PathValue("name"))
	if !ok {
		return nil, nil, nil, false
	}
	cfg, ok := s.restConfig(w, r, in)
	if !ok {
		return nil, nil, nil, false
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: %w", in.Metadata.Name, err))
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	pods, err := core.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: list its pods: %w", in.Metadata.Name, err))
		return nil, nil, nil, false
	}
	return in, core, pods.Items, true
}

// summarizePods gives each pod's summary, sorted by namespace and name.
func summarizePods(pods []corev1.Pod) []PodSummary {
	out := make([]PodSummary, 0, len(pods))
	for _, p := range pods {
		ps := PodSummary{Namespace: p.Namespace, Name: p.Name, Phase: string(p.Status.Phase), Containers: len(p.Spec.Containers), PodIP: p.Status.PodIP}
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready {
				ps.Ready++
			}
			ps.Restarts += c.RestartCount
		}
		if p.Status.StartTime != nil {
			t := p.Status.StartTime.Time
			ps.StartTime = &t
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
