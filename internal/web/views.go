package web

import (
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/usage"
)

// What a stream sends, as the data of its Server-Sent Events (one JSON object each):
//
//	snapshot  snapshot: what the page shows now; sent first, and again after every reconnect
//	fleet     change{Type, Fleet}: a fleet added, modified or deleted
//	instance  change{Type, Instance}: an instance added, modified or deleted
//	event     eventView: a new event
//	health    map instance -> load balancer state: the instances whose state changed
//	sample    sample: the figures of the last second

// snapshot is the first message of a stream.
type snapshot struct {
	Fleets    []fleetView    `json:"fleets"`
	Instances []instanceView `json:"instances"`
	Events    []eventView    `json:"events"`
	// SampleEvery is the time between samples, in seconds, for the charts' axes.
	SampleEvery float64 `json:"sampleEvery"`
}

// change is a fleet or an instance that was added, modified or deleted.
type change struct {
	Type     string        `json:"type"`
	Fleet    *fleetView    `json:"fleet,omitempty"`
	Instance *instanceView `json:"instance,omitempty"`
}

// fleetView is a fleet as the dashboard sends it: the object, with the figures the pages show
// that herd get computes, so that the two always agree.
type fleetView struct {
	*v1alpha1.Fleet
	// Desired is how many instances the fleet should run across its regions: the "of" in its
	// ready count.
	Desired int32 `json:"desired"`
}

func viewFleet(f *v1alpha1.Fleet) fleetView { return fleetView{Fleet: f, Desired: f.TotalDesired()} }

// instanceView is what the dashboard shows of an instance: the grid holds thousands, so it is
// kept to what a cell and the instance page need.
type instanceView struct {
	Name      string                 `json:"name"`
	Fleet     string                 `json:"fleet"`
	Region    string                 `json:"region"`
	Revision  string                 `json:"revision"`
	Provider  string                 `json:"provider,omitempty"`
	Phase     v1alpha1.InstancePhase `json:"phase"`
	Address   string                 `json:"address,omitempty"`
	LBHealth  string                 `json:"lbHealth,omitempty"`
	LastError string                 `json:"lastError,omitempty"`
	CreatedAt *time.Time             `json:"createdAt,omitempty"`
	ReadyAt   *time.Time             `json:"readyAt,omitempty"`
}

func viewInstance(in *v1alpha1.Instance, health map[string]string) instanceView {
	return instanceView{Name: in.Metadata.Name, Fleet: in.Spec.Fleet, Region: in.Spec.Region, Revision: in.Spec.Revision,
		Provider: in.Spec.Provider, Phase: in.Status.Phase, Address: in.Status.Address, LBHealth: health[in.Metadata.Name],
		LastError: in.Status.LastError, CreatedAt: in.Status.CreatedAt, ReadyAt: in.Status.ReadyAt}
}

type eventView struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Object  string    `json:"object"`
	Time    time.Time `json:"time"`
}

func viewEvent(e *v1alpha1.Event) eventView {
	return eventView{Type: e.Type, Reason: e.Reason, Message: e.Message, Object: e.Object, Time: e.Time}
}

// sample is one second's figures: a fleet page gets its traffic per revision and region and its
// revisions' weights; an instance page the instance's own figures.
type sample struct {
	Time     time.Time          `json:"time"`
	Groups   []usage.GroupUsage `json:"groups,omitempty"`
	Weights  map[string]int32   `json:"weights,omitempty"`
	Instance *apiserver.Usage   `json:"instance,omitempty"`
}

// scope is what one page shows: every fleet (the overview), one fleet, or one instance.
type scope struct {
	fleet    string
	instance string
}

func (sc scope) wantsFleet(name, instanceFleet string) bool {
	switch {
	case sc.instance != "":
		return name == instanceFleet
	case sc.fleet != "":
		return name == sc.fleet
	}
	return true
}

func (sc scope) wantsInstance(in *v1alpha1.Instance) bool {
	switch {
	case sc.instance != "":
		return in.Metadata.Name == sc.instance
	case sc.fleet != "":
		return in.Spec.Fleet == sc.fleet
	}
	return true
}

// wantsEvent matches events about the page's objects: a fleet page's are the fleet's own and its
// instances' (named "<fleet>-<5 characters>", so fleet web does not take web-2's).
func (sc scope) wantsEvent(e *v1alpha1.Event) bool {
	switch {
	case sc.instance != "":
		return e.Object == "Instance/"+sc.instance
	case sc.fleet != "":
		if e.Object == "Fleet/"+sc.fleet {
			return true
		}
		rest, ok := strings.CutPrefix(e.Object, "Instance/"+sc.fleet+"-")
		return ok && len(rest) == 5 && !strings.Contains(rest, "-")
	}
	return true
}
