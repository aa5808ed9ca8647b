package v1alpha1

import "time"

// Instance is one one-node Kubernetes cluster of a fleet. Instances are made and owned by the
// controller; users read them.
type Instance struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     InstanceSpec   `json:"spec"`
	Status   InstanceStatus `json:"status,omitempty"`
}

// InstanceSpec is fixed when the instance is made: instances are immutable.
type InstanceSpec struct {
	// Fleet is the owning fleet's name.
	Fleet string `json:"fleet"`
	// Revision is the fleet revision the instance belongs to.
	Revision string `json:"revision"`
	// Region is the region it runs in.
	Region string `json:"region"`
	// Provider is the provider that runs it.
	Provider string `json:"provider"`
	// Image is the node image it boots from.
	Image string `json:"image"`
}

// InstancePhase is where an instance is in its life.
type InstancePhase string

// Instance phases.
const (
	// PhasePending: recorded, not yet created by the provider.
	PhasePending InstancePhase = "Pending"
	// PhaseBooting: created, its cluster and workload are starting.
	PhaseBooting InstancePhase = "Booting"
	// PhaseReady: serving.
	PhaseReady InstancePhase = "Ready"
	// PhaseUnhealthy: running but failing health checks.
	PhaseUnhealthy InstancePhase = "Unhealthy"
	// PhaseTerminating: being drained and deleted.
	PhaseTerminating InstancePhase = "Terminating"
	// PhaseFailed: the provider reports it dead or it could not boot.
	PhaseFailed InstancePhase = "Failed"
)

// InstanceStatus is what the controller last observed of an instance.
type InstanceStatus struct {
	// Phase is Pending, Booting, Ready, Unhealthy, Terminating or Failed.
	Phase InstancePhase `json:"phase"`
	// ProviderID is the provider's own identifier for the instance.
	ProviderID string `json:"providerID,omitempty"`
	// Address is the instance's IP address.
	Address string `json:"address,omitempty"`
	// LBHealth is the load balancer's view of the instance: healthy, unhealthy, draining or unknown.
	LBHealth string `json:"lbHealth,omitempty"`
	// CreatedAt is when the provider was asked to create it.
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	// ReadyAt is when it first became Ready.
	ReadyAt *time.Time `json:"readyAt,omitempty"`
	// TerminatingAt is when its deletion began.
	TerminatingAt *time.Time `json:"terminatingAt,omitempty"`
	// LastError is the most recent error about this instance, cleared when it is Ready.
	LastError string `json:"lastError,omitempty"`
}

// Event records something that happened to an object, like a Kubernetes event.
type Event struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	// Type is Normal or Warning.
	Type string `json:"type"`
	// Reason is a short CamelCase word, e.g. ScaledUp.
	Reason string `json:"reason"`
	// Message says what happened, for a person.
	Message string `json:"message"`
	// Object is the subject, "Kind/name".
	Object string `json:"object"`
	// Time is when it happened.
	Time time.Time `json:"time"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Orphan is an instance a provider runs that no fleet owns: it has no Instance record and its
// fleet would not adopt it (no such fleet, no herd.dev/fleet label, or a region the fleet does
// not run in). herd reports it (`herd get instances --orphans`) and deletes it once its grace
// period is over, unless herd up runs with --orphans=keep.
type Orphan struct {
	// Name is the instance's name on its provider.
	Name     string `json:"name"`
	Provider string `json:"provider"`
	// Fleet is the instance's herd.dev/fleet label, "" when it has none.
	Fleet string `json:"fleet,omitempty"`
	// Region is the region its provider runs it in.
	Region string `json:"region,omitempty"`
	Image  string `json:"image,omitempty"`
	// State is what its provider reports: Booting, Ready, Failed or Deleting.
	State     string     `json:"state"`
	CreatedAt *time.Time `json:"createdAt,omitempty"`
	// Why says what makes it an orphan.
	Why string `json:"why"`
	// FoundAt is when the controller first found it.
	FoundAt time.Time `json:"foundAt"`
	// DeleteAt is when the controller deletes it; not set when orphans are kept.
	DeleteAt *time.Time `json:"deleteAt,omitempty"`
	// LastError is why its last deletion failed.
	LastError string `json:"lastError,omitempty"`
}
