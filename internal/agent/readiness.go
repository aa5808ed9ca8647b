package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// verdict is the readiness of one thing.
type verdict struct {
	ready bool
	// why says, when not ready, what is missing (e.g. "0 of 1 replicas available").
	why string
	// terminal is set when the thing can never become ready by itself (e.g. a Deployment past
	// its progress deadline): the boot fails at once instead of at the ready timeout.
	terminal bool
}

// nodeVerdict evaluates a Node: ready when its Ready condition is True.
func nodeVerdict(n *corev1.Node) verdict {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return verdict{ready: true}
			}
			return verdict{why: fmt.Sprintf("node %s is not Ready (%s: %s)", n.Name, c.Reason, c.Message)}
		}
	}
	return verdict{why: fmt.Sprintf("node %s has not reported Ready yet", n.Name)}
}

func replicasOf(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// deploymentVerdict evaluates a Deployment the way `kubectl rollout status` does: the controller
// has seen the latest spec, every replica is updated and available, and no old replica is left.
func deploymentVerdict(d *appsv1.Deployment) verdict {
	want := replicasOf(d.Spec.Replicas)
	s := d.Status
	if d.Generation > s.ObservedGeneration {
		return verdict{why: "the deployment controller has not seen it yet" + conditionsSuffix(deploymentConditions(d))}
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return verdict{why: "progress deadline exceeded: " + c.Message, terminal: true}
		}
	}
	var why string
	switch {
	case s.UpdatedReplicas < want:
		why = fmt.Sprintf("%d of %d replicas updated", s.UpdatedReplicas, want)
	case s.Replicas > s.UpdatedReplicas:
		why = fmt.Sprintf("%d old replicas pending termination", s.Replicas-s.UpdatedReplicas)
	case s.AvailableReplicas < s.UpdatedReplicas:
		why = fmt.Sprintf("%d of %d replicas available", s.AvailableReplicas, want)
	default:
		return verdict{ready: true}
	}
	return verdict{why: why + conditionsSuffix(deploymentConditions(d))}
}

func deploymentConditions(d *appsv1.Deployment) []condition {
	var out []condition
	for _, c := range d.Status.Conditions {
		out = append(out, condition{string(c.Type), string(c.Status), c.Reason, c.Message})
	}
	return out
}

// statefulSetVerdict evaluates a StatefulSet: the controller has seen the latest spec, and every
// replica is ready, available and (for rolling updates) at the update revision.
func statefulSetVerdict(ss *appsv1.StatefulSet) verdict {
	want := replicasOf(ss.Spec.Replicas)
	s := ss.Status
	var why string
	switch {
	case ss.Generation > s.ObservedGeneration:
		why = "the statefulset controller has not seen it yet"
	case s.ReadyReplicas < want:
		why = fmt.Sprintf("%d of %d replicas ready", s.ReadyReplicas, want)
	case s.AvailableReplicas < want:
		why = fmt.Sprintf("%d of %d replicas available", s.AvailableReplicas, want)
	case ss.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType && s.UpdateRevision != s.CurrentRevision:
		why = fmt.Sprintf("%d of %d replicas at the update revision", s.UpdatedReplicas, want)
	default:
		return verdict{ready: true}
	}
	var conds []condition
	for _, c := range s.Conditions {
		conds = append(conds, condition{string(c.Type), string(c.Status), c.Reason, c.Message})
	}
	return verdict{why: why + conditionsSuffix(conds)}
}

// daemonSetVerdict evaluates a DaemonSet: the controller has seen the latest spec, and every
// scheduled pod is updated and available.
func daemonSetVerdict(ds *appsv1.DaemonSet) verdict {
	s := ds.Status
	var why string
	switch {
	case ds.Generation > s.ObservedGeneration:
		why = "the daemonset controller has not seen it yet"
	case s.UpdatedNumberScheduled < s.DesiredNumberScheduled:
		why = fmt.Sprintf("%d of %d pods updated", s.UpdatedNumberScheduled, s.DesiredNumberScheduled)
	case s.NumberAvailable < s.DesiredNumberScheduled:
		why = fmt.Sprintf("%d of %d pods available", s.NumberAvailable, s.DesiredNumberScheduled)
	default:
		return verdict{ready: true}
	}
	var conds []condition
	for _, c := range s.Conditions {
		conds = append(conds, condition{string(c.Type), string(c.Status), c.Reason, c.Message})
	}
	return verdict{why: why + conditionsSuffix(conds)}
}

// condition is a workload condition, whatever its kind.
type condition struct{ typ, status, reason, message string }

// conditionsSuffix renders the conditions worth showing: those that are not plainly fine.
func conditionsSuffix(cs []condition) string {
	var parts []string
	for _, c := range cs {
		fine := (c.typ == "Progressing" && c.status == "True" && c.reason != "ProgressDeadlineExceeded") ||
			(c.typ == "Available" && c.status == "True")
		if fine {
			continue
		}
		s := c.typ + "=" + c.status
		if c.reason != "" {
			s += " " + c.reason
		}
		if c.message != "" {
			s += ": " + c.message
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// terminalWaitingReasons are container waiting reasons that cannot pass in an instance whose
// images are all baked in: the image is not there and will never be.
var terminalWaitingReasons = map[string]bool{
	"ErrImageNeverPull": true,
	"InvalidImageName":  true,
}

// logTailFunc returns the last lines of a container's log (its previous run's with previous),
// "" when there are none.
type logTailFunc func(pod *corev1.Pod, container string, previous bool) string

// podsSteady reports whether every container of every pod runs and is ready: what an available
// workload's pods show unless one of them has just exited.
func podsSteady(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil || !cs.Ready {
				return false
			}
		}
	}
	return true
}

// latestStart is the latest start among the running containers of pods, and false when one of
// them does not run.
func latestStart(pods []corev1.Pod) (time.Time, bool) {
	var last time.Time
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil {
				return time.Time{}, false
			}
			if t := cs.State.Running.StartedAt.Time; t.After(last) {
				last = t
			}
		}
	}
	return last, true
}

// podsReport explains why pods are not ready, from their conditions and their containers'
// states, with the last log lines of containers that exited with an error (when logTail is not
// nil). terminal is set when one of them can never start (see terminalWaitingReasons).
func podsReport(pods []corev1.Pod, logTail logTailFunc) (report string, terminal bool) {
	lastLines := func(p *corev1.Pod, container string, previous bool) string {
		if logTail == nil {
			return ""
		}
		if l := logTail(p, container, previous); l != "" {
			return "; last log lines: " + l
		}
		return ""
	}
	if len(pods) == 0 {
		return "no pods", false
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	var lines []string
	for _, p := range pods {
		var probs []string
		if p.DeletionTimestamp != nil {
			probs = append(probs, "terminating")
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				probs = append(probs, fmt.Sprintf("not scheduled: %s: %s", c.Reason, c.Message))
			}
		}
		statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
		for _, cs := range statuses {
			switch {
			case cs.State.Waiting != nil:
				w := cs.State.Waiting
				s := fmt.Sprintf("container %s waiting: %s", cs.Name, w.Reason)
				if w.Message != "" {
					s += ": " + w.Message
				}
				if t := cs.LastTerminationState.Terminated; t != nil {
					s += fmt.Sprintf(" (last exit code %d: %s)", t.ExitCode, strings.TrimSpace(t.Reason+" "+t.Message))
					if t.ExitCode != 0 {
						s += lastLines(&p, cs.Name, true)
					}
				}
				if terminalWaitingReasons[w.Reason] {
					terminal = true
				}
				probs = append(probs, s)
			case cs.State.Terminated != nil:
				t := cs.State.Terminated
				s := fmt.Sprintf("container %s terminated: exit code %d %s", cs.Name, t.ExitCode, strings.TrimSpace(t.Reason+" "+t.Message))
				if t.ExitCode != 0 {
					s += lastLines(&p, cs.Name, false)
				}
				probs = append(probs, s)
			case !cs.Ready:
				probs = append(probs, fmt.Sprintf("container %s running, not ready (restarts %d)", cs.Name, cs.RestartCount))
			}
		}
		if len(probs) == 0 && p.Status.Phase != corev1.PodRunning {
			probs = append(probs, "phase "+string(p.Status.Phase))
		}
		if len(probs) == 0 {
			probs = append(probs, "running")
		}
		lines = append(lines, fmt.Sprintf("pod %s: %s", p.Name, strings.Join(probs, "; ")))
	}
	return strings.Join(lines, "; "), terminal
}
