package v1alpha1

import "time"

// ChaosAction is a fault injected on purpose with `herd chaos`: a region cut off or degraded, an
// instance killed, a fleet's health checks paused. It is stored, so that it is undone when its
// duration ends, when it is stopped, and when herd up starts again, whatever happened meanwhile.
type ChaosAction struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     ChaosActionSpec   `json:"spec"`
	Status   ChaosActionStatus `json:"status"`
}

// GetMeta returns the action's metadata.
func (c *ChaosAction) GetMeta() *ObjectMeta { return &c.Metadata }

// Chaos actions.
const (
	// ChaosPartitionRegion cuts a region off its clients (its link drops every packet).
	ChaosPartitionRegion = "partition-region"
	// ChaosDegradeRegion gives a region's link more latency and loss.
	ChaosDegradeRegion = "degrade-region"
	// ChaosKillInstance kills every process of an instance with SIGKILL; nothing to undo.
	ChaosKillInstance = "kill-instance"
	// ChaosPauseHealth stops the load balancers' health checks of a fleet's targets: they keep
	// their last state.
	ChaosPauseHealth = "pause-health"
)

// ChaosActionSpec says what to do, to what, and for how long.
type ChaosActionSpec struct {
	// Action is one of partition-region, degrade-region, kill-instance, pause-health.
	Action string `json:"action"`
	// Target is the region, instance or fleet the action applies to.
	Target string `json:"target"`
	// Latency is the round trip degrade-region adds to the region's link.
	Latency Duration `json:"latency,omitempty"`
	// Loss is the share of packets, 0 to 1, degrade-region drops in each direction.
	Loss float64 `json:"loss,omitempty"`
	// Duration is how long the action lasts before it is undone (not for kill-instance).
	Duration Duration `json:"duration,omitempty"`
}

// Phases of a chaos action.
const (
	ChaosActive = "Active" // in force until EndsAt
	ChaosEnded  = "Ended"  // undone (or, for kill-instance, done)
	ChaosFailed = "Failed" // could not be done, or not undone: Message says what to do
)

// ChaosActionStatus is where the action stands.
type ChaosActionStatus struct {
	Phase     string     `json:"phase"`
	StartedAt time.Time  `json:"startedAt"`
	EndsAt    *time.Time `json:"endsAt,omitempty"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	// Message says why it ended, or what failed and how to fix it.
	Message string `json:"message,omitempty"`
}
