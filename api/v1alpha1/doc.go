// Package v1alpha1 holds the public types users write and read: Fleet and NodeImage (the specs users
// apply), Distribution (an edge cache in front of fleets, served by herd edge), Instance and Event
// (what herd reports). They are serialised as YAML or JSON with apiVersion herd.dev/v1alpha1 and a
// kind.
//
// Every field's comment states its default. Defaulting and validation live apart from the types, in
// defaults.go and validation.go, so that the types read as the reference for the file format.
package v1alpha1

// GroupVersion is the apiVersion every herd object carries.
const GroupVersion = "herd.dev/v1alpha1"

// Kinds herd knows.
const (
	KindFleet     = "Fleet"
	KindNodeImage = "NodeImage"
	KindInstance  = "Instance"
	KindEvent     = "Event"
	// KindDistribution is an edge's configuration, served by herd edge.
	KindDistribution = "Distribution"
)

// Labels herd puts on every instance so that a restarted controller finds and adopts what exists.
const (
	LabelFleet    = "herd.dev/fleet"
	LabelRevision = "herd.dev/revision"
	LabelRegion   = "herd.dev/region"
)
