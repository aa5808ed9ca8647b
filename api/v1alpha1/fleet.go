package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fleet is an application run as a set of identical one-node Kubernetes clusters (instances)
// behind a load balancer.
type Fleet struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     FleetSpec  `json:"spec"`
	// Pinned is the node image the fleet's instances boot: spec.image as the API resolved it when
	// the fleet was last applied (or restarted). A later build of the same name changes nothing until
	// the next `herd apply` or `herd rollout restart`. The API is its only writer, except once for a
	// fleet stored before images were pinned, which the controller pins when it first sees it.
	// Ignored on apply.
	Pinned *PinnedImage `json:"pinned,omitempty"`
	// Requests are commands users gave the fleet that are not part of its desired state. The API
	// is their only writer; the controller reads them and records in the status which it acted on.
	// Ignored on apply.
	Requests FleetRequests `json:"requests,omitzero"`
	Status   FleetStatus   `json:"status,omitempty"`
}

// PinnedImage is spec.image resolved to the node image bundle instances boot from.
type PinnedImage struct {
	// Ref is spec.image as it was resolved: a NodeImage name or a digest.
	Ref string `json:"ref"`
	// Digest is the bundle digest Ref named then ("sha256:..."). For a fleet whose regions all run
	// on providers that boot no node image (fake), a name no image was built for is kept as written.
	Digest string `json:"digest"`
	// By says who resolved it: apply, rollout restart, rollout undo, or upgrade (a fleet stored
	// before images were pinned, pinned once by the controller to what it already ran).
	By string `json:"by"`
	// At is when it was resolved.
	At time.Time `json:"at"`
}

// What resolved a fleet's pinned image (PinnedImage.By).
const (
	PinnedByApply   = "apply"
	PinnedByRestart = "rollout restart"
	PinnedByUndo    = "rollout undo"
	PinnedByUpgrade = "upgrade"
)

// BootImage returns the node image the fleet's instances boot: the pinned digest, or spec.image
// while the fleet has none pinned.
func (f *Fleet) BootImage() string {
	if f.Pinned != nil && f.Pinned.Digest != "" {
		return f.Pinned.Digest
	}
	return f.Spec.Image
}

// FleetRequests holds the latest command of each kind a user gave a fleet.
type FleetRequests struct {
	// Rollout is the latest `herd rollout promote|abort`.
	Rollout *RolloutRequest `json:"rollout,omitempty"`
	// TenantPins keep tenants of a fleet with spec.tenancy on images of their own, by tenant.
	TenantPins map[string]TenantPin `json:"tenantPins,omitempty"`
}

// RolloutRequest is a user's command to one rollout.
type RolloutRequest struct {
	// Command is Promote or Abort.
	Command string `json:"command"`
	// Revision is the revision whose rollout the command is for; a rollout of another revision
	// ignores it.
	Revision string `json:"revision"`
	// RequestedAt is when the API recorded the command; it tells two commands of the same kind apart.
	RequestedAt time.Time `json:"requestedAt"`
}

// Equal reports whether r and o are the same request (both may be nil).
func (r *RolloutRequest) Equal(o *RolloutRequest) bool {
	if r == nil || o == nil {
		return r == o
	}
	return r.Command == o.Command && r.Revision == o.Revision && r.RequestedAt.Equal(o.RequestedAt)
}

// FleetSpec is the desired state of a fleet.
type FleetSpec struct {
	// Image names the node image every instance boots from: a bundle digest ("sha256:...") or the
	// name of a NodeImage built with `herd image build`. A name is resolved to the digest it names
	// when the fleet is applied (see Fleet.Pinned): a later build of the name changes nothing until
	// the next apply or `herd rollout restart`. A new digest makes a new revision. Required.
	Image string `json:"image"`
	// Replicas bounds and sets the number of instances.
	Replicas Replicas `json:"replicas"`
	// Listeners are the ports the load balancer opens for this fleet. Default: none (the fleet is not
	// reachable through the load balancer).
	Listeners []Listener `json:"listeners,omitempty"`
	// HealthCheck is how the load balancer decides an instance may receive traffic.
	HealthCheck HealthCheck `json:"healthCheck,omitempty"`
	// Autoscaling changes the desired count between min and max from load. Default: off.
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
	// Rollout is how a new revision replaces the current one. Default: Rolling with maxSurge 1 and
	// maxUnavailable 0.
	Rollout Rollout `json:"rollout,omitempty"`
	// Regions are where instances run. Default: one region named "local" on the local provider.
	Regions []Region `json:"regions,omitempty"`
	// Global routes users to the fleet's regions through herd's authoritative DNS. Default: none.
	Global *Global `json:"global,omitempty"`
	// Tenancy gives each tenant instances of its own, routed by a key of the request (see
	// tenancy.go); spec.replicas is then unused. Default: none (every instance serves every request).
	Tenancy *Tenancy `json:"tenancy,omitempty"`
	// Discovery publishes the fleet to other fleets' instances as NAME.herd.internal. Default: on
	// (see Discovery) when the fleet has a listener.
	Discovery *Discovery `json:"discovery,omitempty"`
}

// Replicas bounds the fleet's size.
type Replicas struct {
	// Min is the fewest instances the fleet may have. Default: 1. May be 0 (scale to zero).
	Min *int32 `json:"min,omitempty"`
	// Max is the most instances the fleet may have. Default: the larger of min and desired, at least 1.
	Max *int32 `json:"max,omitempty"`
	// Desired is the number of instances to run now; the autoscaler and `herd scale` change it
	// within [min, max]. Default: min.
	Desired *int32 `json:"desired,omitempty"`
}

// Protocol is what a listener speaks.
type Protocol string

// Listener protocols.
const (
	ProtocolHTTP Protocol = "http"
	ProtocolTCP  Protocol = "tcp"
)

// Listener maps a load-balancer port to a port on every instance.
type Listener struct {
	// Name identifies the listener within the fleet. Default: the protocol and port, e.g. "http-8080".
	Name string `json:"name,omitempty"`
	// Port is the load balancer's port (1-65535). Required.
	Port int32 `json:"port"`
	// InstancePort is the port on each instance that receives the traffic (1-65535), typically a
	// NodePort. Required.
	InstancePort int32 `json:"instancePort"`
	// Protocol is http or tcp. Default: http.
	Protocol Protocol `json:"protocol,omitempty"`
	// TLS, if set, makes an http listener HTTPS: the load balancer terminates TLS (1.2 and 1.3,
	// HTTP/2 and HTTP/1.1 by ALPN) and forwards cleartext to the instances, with
	// X-Forwarded-Proto: https. Default: none (cleartext).
	TLS *ListenerTLS `json:"tls,omitempty"`
}

// ListenerTLS is a listener's certificate: a certificate and key from files, or one that herd up
// issues from its local certificate authority.
type ListenerTLS struct {
	// CertFile is the absolute path of a PEM certificate chain on the host herd up runs on. It is
	// re-read when it changes, so a renewal needs no apply. Required with keyFile.
	CertFile string `json:"certFile,omitempty"`
	// KeyFile is the absolute path of the certificate's PEM private key. Required with certFile.
	KeyFile string `json:"keyFile,omitempty"`
	// LocalCA, instead of files, has herd up issue the certificate from its own certificate
	// authority (<data-dir>/tls/ca.crt, which clients trust with curl --cacert), for localhost,
	// 127.0.0.1, the load balancer's address and spec.global.hostname: for tests and development.
	LocalCA bool `json:"localCA,omitempty"`
}

// HealthCheck is an active HTTP check the load balancer runs against every instance.
type HealthCheck struct {
	// Path is the HTTP path requested. Default: "/healthz".
	Path string `json:"path,omitempty"`
	// Port is the instance port checked. Default: the first listener's instancePort.
	Port int32 `json:"port,omitempty"`
	// Interval is the time between checks. Default: 1s.
	Interval *Duration `json:"interval,omitempty"`
	// Timeout bounds one check; must not exceed interval. Default: 500ms.
	Timeout *Duration `json:"timeout,omitempty"`
	// HealthyThreshold is how many consecutive passes make an instance healthy. Default: 2.
	HealthyThreshold int32 `json:"healthyThreshold,omitempty"`
	// UnhealthyThreshold is how many consecutive failures make an instance unhealthy. Default: 2.
	UnhealthyThreshold int32 `json:"unhealthyThreshold,omitempty"`
	// GracePeriod is how long after an instance is created its failed checks are not held against
	// it. Once it has passed, an instance the load balancer reports unhealthy or ejected for longer
	// than unhealthyThreshold x interval is drained, deleted and replaced. Default: 60s.
	GracePeriod *Duration `json:"gracePeriod,omitempty"`
}

// AutoscalingMetric is what target tracking follows.
type AutoscalingMetric string

// Autoscaling metrics.
const (
	MetricRequestsPerSecond AutoscalingMetric = "requestsPerSecond"
	MetricCPU               AutoscalingMetric = "cpu"
	MetricLatencyP95        AutoscalingMetric = "latencyP95"
)

// Autoscaling is target tracking on one metric.
type Autoscaling struct {
	// Metric is requestsPerSecond (per instance, from the load balancer), cpu (percent of a core
	// used by the whole instance, read from its agent's /metrics every 2s) or latencyP95
	// (milliseconds, from the load balancer). Default: requestsPerSecond.
	Metric AutoscalingMetric `json:"metric,omitempty"`
	// Target is the value per instance to track. Required when autoscaling is set; must be > 0.
	Target float64 `json:"target"`
	// ScaleInStabilization is how long load must stay low before instances are removed. Default: 300s.
	ScaleInStabilization *Duration `json:"scaleInStabilization,omitempty"`
	// WarmPool is how many booted instances are kept out of rotation, ready to be registered. Default: 0.
	WarmPool int32 `json:"warmPool,omitempty"`
}

// RolloutStrategy is how a new revision replaces the current one.
type RolloutStrategy string

// Rollout strategies.
const (
	StrategyRolling   RolloutStrategy = "Rolling"
	StrategyBlueGreen RolloutStrategy = "BlueGreen"
	StrategyCanary    RolloutStrategy = "Canary"
)

// Rollout configures revision changes.
type Rollout struct {
	// Strategy is Rolling, BlueGreen or Canary. Default: Rolling.
	Strategy RolloutStrategy `json:"strategy,omitempty"`
	// MaxSurge is how many instances above desired may exist during a rolling update. Default: 1.
	MaxSurge *int32 `json:"maxSurge,omitempty"`
	// MaxUnavailable is how many instances below desired may be not ready during a rolling update.
	// Default: 0.
	MaxUnavailable *int32 `json:"maxUnavailable,omitempty"`
	// RollbackWindow is how long a blue/green rollout keeps the old instances after the switch.
	// Default: 300s.
	RollbackWindow *Duration `json:"rollbackWindow,omitempty"`
	// Steps are the canary's traffic weights, in percent, each held for its pause. Default (Canary
	// only): 10% for 60s, 50% for 60s.
	Steps []CanaryStep `json:"steps,omitempty"`
	// Analysis compares the canary with the stable revision during each step. Default: see its fields.
	Analysis *CanaryAnalysis `json:"analysis,omitempty"`
	// RegionOrder is the order in which a new revision reaches the fleet's regions, one region (a
	// wave) at a time, the strategy applied inside each; a canary that fails in one region stops
	// the wave there. Each name must be a region of the fleet, at most once; regions left out
	// follow, in the order of spec.regions. Default: the order of spec.regions.
	RegionOrder []string `json:"regionOrder,omitempty"`
}

// CanaryStep is one traffic weight held for a while.
type CanaryStep struct {
	// Weight is the percent of traffic sent to the new revision (1-100). Required.
	Weight int32 `json:"weight"`
	// Pause is how long the weight is held before the next step. Default: 60s.
	Pause *Duration `json:"pause,omitempty"`
}

// CanaryAnalysis bounds how much worse the canary may be than the stable revision.
type CanaryAnalysis struct {
	// MaxErrorRateRatio fails the canary when its 5xx rate exceeds the stable one's times this. Default: 2.
	MaxErrorRateRatio float64 `json:"maxErrorRateRatio,omitempty"`
	// MaxLatencyRatio fails the canary when its p95 latency exceeds the stable one's times this. Default: 1.5.
	MaxLatencyRatio float64 `json:"maxLatencyRatio,omitempty"`
	// MinRequests is the smallest sample judged. Default: 100.
	MinRequests int64 `json:"minRequests,omitempty"`
}

// Region is a place instances run, on one provider.
type Region struct {
	// Name identifies the region (a DNS label). Required.
	Name string `json:"name"`
	// Provider runs the instances: "local" (real one-node clusters on this machine), "aws" (EC2
	// instances, docs/aws.md) or "fake" (in memory, for tests). Default: the control plane's provider (`herd up --provider`).
	Provider string `json:"provider,omitempty"`
	// Options are passed to the provider as they are, and checked by it on apply. The local
	// provider takes latency (the round trip its link to the internet adds, e.g. "40ms"), jitter
	// and loss (e.g. "0.5%"); see docs/regions.md. Default: none.
	Options map[string]string `json:"options,omitempty"`
	// Replicas overrides the fleet's replicas in this region: every region runs its own group of
	// instances, of spec.replicas unless set here. Each field left unset falls back to the fleet's,
	// moved inside the bounds this region does set (see docs/regions.md); the figures in force are
	// in status.regions. Default: the fleet's replicas.
	Replicas *Replicas `json:"replicas,omitempty"`
	// Default is deprecated: every region runs its own instances, so no region is where new
	// instances go. It only names the region an instance without a region label is counted in. At
	// most one region is the default. Default: the first region.
	Default bool `json:"default,omitempty"`
}

// FleetStatus is what the controller observed.
type FleetStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// CurrentRevision is the revision new instances are created from.
	CurrentRevision string `json:"currentRevision,omitempty"`
	// Revisions lists every revision that still has instances, newest first.
	Revisions []RevisionStatus `json:"revisions,omitempty"`
	// Replicas counts all instances that are not terminating.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas counts the instances that serve: Ready by their agent's verdict and healthy
	// in the load balancer that sends them traffic (the region's own, for a fleet served by its
	// regions' load balancers); for a fleet without listeners, Ready alone.
	ReadyReplicas int32 `json:"readyReplicas"`
	// Phase summarises the fleet: Pending, Scaling, Ready, Degraded or Deleting.
	Phase string `json:"phase,omitempty"`
	// Message explains the phase when it is not Ready.
	Message string `json:"message,omitempty"`
	// Rollout is the progress of the latest BlueGreen or Canary rollout (of every rollout, for a
	// fleet in several regions: a wave), kept here so that a restarted controller resumes it from
	// the step it had reached.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Regions is each region's group of instances, in the order of spec.regions.
	Regions []RegionStatus `json:"regions,omitempty"`
	// History lists the revisions the fleet has served, newest first (at most 10).
	History []RevisionHistory `json:"history,omitempty"`
	// Healing is self-healing's memory while replacements are under way or failing, kept here so
	// that a restarted controller keeps the bound and the backoff.
	Healing *HealingStatus `json:"healing,omitempty"`
	// Conditions are the fleet's Ready, Available, Progressing, LoadBalancerReady and Degraded
	// conditions, each with its reason, message and the time its status last changed.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastReconcile is when the controller last wrote this status.
	LastReconcile *time.Time `json:"lastReconcile,omitempty"`
}

// Fleet condition types. Each is True, False or Unknown, with a reason (one CamelCase word) and a
// message for people.
const (
	// ConditionReady: every desired instance runs the current revision and serves (its agent
	// says Ready and the load balancer that sends it traffic finds it healthy), the load
	// balancer serves every listener, and no rollout or error is pending.
	ConditionReady = "Ready"
	// ConditionAvailable: at least desired minus maxUnavailable instances serve.
	ConditionAvailable = "Available"
	// ConditionProgressing: the controller is moving the fleet toward its spec (scaling, rolling
	// out, replacing failed instances).
	ConditionProgressing = "Progressing"
	// ConditionLoadBalancerReady: the load balancer serves every listener of the fleet.
	ConditionLoadBalancerReady = "LoadBalancerReady"
	// ConditionDegraded: something needs a person: a failed or rolled-back rollout, replacements
	// that keep failing, a refused listener, an error reconciling.
	ConditionDegraded = "Degraded"
)

// HealingStatus is what self-healing remembers of a fleet between reconciles.
type HealingStatus struct {
	// Replacements are the instances created in place of replaced ones that have not proved
	// healthy yet; they count against the bound on replacements under way.
	Replacements []string `json:"replacements,omitempty"`
	// Failures counts replacements in a row that failed themselves.
	Failures int32 `json:"failures,omitempty"`
	// BackoffUntil is when healing may replace instances again after the last failure.
	BackoffUntil *time.Time `json:"backoffUntil,omitempty"`
	// LastFailure is why the fleet's last failed instance failed, as its provider said: for a
	// local instance whose workload never became ready, the pod, container and reason
	// (ErrImageNeverPull, CrashLoopBackOff with the last log lines, Pending with the
	// scheduler's message). Cleared once a replacement serves.
	LastFailure string `json:"lastFailure,omitempty"`
}

// Rollout phases.
const (
	RolloutProgressing = "Progressing"
	RolloutPaused      = "Paused"
	RolloutSucceeded   = "Succeeded"
	RolloutRolledBack  = "RolledBack"
	RolloutFailed      = "Failed"
	// RolloutWaiting is a region's phase in a wave before the wave reaches it.
	RolloutWaiting = "Waiting"
)

// RolloutStatus is the state of one rollout from PreviousRevision to Revision.
type RolloutStatus struct {
	// Revision is the revision being rolled out.
	Revision string `json:"revision"`
	// PreviousRevision is the revision serving when the rollout began (the stable one).
	PreviousRevision string `json:"previousRevision,omitempty"`
	// Strategy is the strategy the rollout follows.
	Strategy RolloutStrategy `json:"strategy"`
	// Step is the canary step in progress (0-based; len(steps) while promoting), or for BlueGreen
	// 0 before the switch and 1 after it.
	Step int32 `json:"step"`
	// StepStartedAt is when the current step's weights were applied.
	StepStartedAt *time.Time `json:"stepStartedAt,omitempty"`
	// Phase is Progressing, Paused, Succeeded, RolledBack or Failed.
	Phase string `json:"phase"`
	// Message explains the phase.
	Message string `json:"message,omitempty"`
	// Weights are the percent of traffic each revision receives while the rollout runs.
	Weights map[string]int32 `json:"weights,omitempty"`
	// HandledRequest is the latest user command (Fleet.Requests.Rollout) the controller has dealt
	// with for this rollout: carried out, or set aside because it was given before the rollout
	// began. A request that differs from it is new, so a restarted controller acts on each once.
	HandledRequest *RolloutRequest `json:"handledRequest,omitempty"`
}

// InProgress reports whether the rollout still runs: it has neither succeeded, nor been rolled
// back, nor failed.
func (ro *RolloutStatus) InProgress() bool {
	return ro != nil && (ro.Phase == RolloutProgressing || ro.Phase == RolloutPaused)
}

// Commands a user can give a rollout in progress.
const (
	// RolloutPromote skips the remaining canary steps and pauses (or a blue/green rollback window)
	// and moves all traffic to the new revision once a full set of it serves.
	RolloutPromote = "Promote"
	// RolloutAbort rolls back at once: the stable revision takes all traffic and the new
	// revision's instances are deleted.
	RolloutAbort = "Abort"
)

// RevisionHistory records when a revision was the one serving.
type RevisionHistory struct {
	// Revision is the revision's name.
	Revision string `json:"revision"`
	// Image is the node image digest it boots from.
	Image string `json:"image"`
	// Ref is the spec.image that was pinned to Image, and PinnedBy what pinned it (apply, rollout
	// restart, rollout undo, upgrade), when the revision was the fleet's current one as it began
	// serving; unset otherwise.
	Ref      string `json:"ref,omitempty"`
	PinnedBy string `json:"pinnedBy,omitempty"`
	// Since is when it became the serving revision.
	Since time.Time `json:"since"`
	// Until is when another revision replaced it; unset while it serves.
	Until *time.Time `json:"until,omitempty"`
}

// RevisionStatus describes one revision of a fleet.
type RevisionStatus struct {
	// Name is "<fleet>-<hash>", the hash covering every instance-shaping field of the spec.
	Name string `json:"name"`
	// Image is the node image the revision's instances boot from.
	Image string `json:"image"`
	// Replicas counts the revision's instances that are not terminating.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas counts its instances that serve (as FleetStatus.ReadyReplicas).
	ReadyReplicas int32 `json:"readyReplicas"`
	// Weight is the percent of traffic it receives.
	Weight int32 `json:"weight"`
}
