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

// scheduledEvents returns, from the instance's events, when each pod was bound to the node and
// when the scheduler first failed to place it (and why), counted from created: the scheduler
// stamps its events to the microsecond, where the kubelet's (a container's start) and the
// controllers' are stamped to the second, too coarse for a timeline. A failed attempt puts the
// pod into the scheduler's back-off, a second or more before the next.
func scheduledEvents(kubeconfig string, created time.Time) ([]event, error) {
	var list struct {
		Items []struct {
			EventTime time.Time `json:"eventTime"`
			Reason    string    `json:"reason"`
			Note      string    `json:"note"`
			Series    *struct {
				Count            int       `json:"count"`
				LastObservedTime time.Time `json:"lastObservedTime"`
			} `json:"series"`
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
		if e.Regarding.Kind != "Pod" || e.EventTime.IsZero() {
			continue
		}
		pod := e.Regarding.Namespace + "/" + e.Regarding.Name
		switch e.Reason {
		case "Scheduled":
			evs = append(evs, event{at: e.EventTime.Sub(created), name: "Pod " + pod + " scheduled"})
		case "FailedScheduling":
			evs = append(evs, event{at: e.EventTime.Sub(created), name: "Pod " + pod + " not scheduled: " + e.Note})
			if e.Series != nil {
				evs = append(evs, event{at: e.Series.LastObservedTime.Sub(created), name: fmt.Sprintf("Pod %s not scheduled again (a series of %d)", pod, e.Series.Count)})
			}
		}
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
