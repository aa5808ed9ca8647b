// When each pod was scheduled, from the instance's own events, for the boot timeline; and
// kubectlGet, which reads the instance's objects for the benchmark.

package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	"herd.dev/herd/internal/kubebin"
)

// scheduledEvents returns, from the instance's events, when each pod was bound to the node, counted
// from created: the scheduler stamps its events to the microsecond, where the kubelet's (a
// container's start) and the controllers' are stamped to the second, too coarse for a timeline.
func scheduledEvents(kubeconfig string, created time.Time) ([]event, error) {
	var list struct {
		Items []struct {
			EventTime time.Time `json:"eventTime"`
			Reason    string    `json:"reason"`
			Regarding struct {
				Kind, Namespace, Name string
			} `json:"regarding"`
		} `json:"items"`
	}
	if err := kubectlGet(kubeconfig, "events.events.k8s.io", &list); err != nil {
		return nil, err
	}
	var evs []event
	for _, e := range list.Items {
		if e.Reason != "Scheduled" || e.Regarding.Kind != "Pod" || e.EventTime.IsZero() {
			continue
		}
		evs = append(evs, event{at: e.EventTime.Sub(created), name: fmt.Sprintf("Pod %s/%s scheduled", e.Regarding.Namespace, e.Regarding.Name)})
	}
	return evs, nil
}

// kubectlGet decodes into list the objects of resource in every namespace of the instance.
func kubectlGet(kubeconfig, resource string, list any) error {
	kubectl, err := kubebin.Path("kubectl")
	if err != nil {
		return err
	}
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", resource, "-A", "-o", "json").Output()
	if err != nil {
		return fmt.Errorf("kubectl get %s: %w", resource, err)
	}
	if err := json.Unmarshal(out, list); err != nil {
		return fmt.Errorf("kubectl get %s: %w", resource, err)
	}
	return nil
}
