package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"
)

// TypeMeta names the schema of an object.
type TypeMeta struct {
	// APIVersion must be "herd.dev/v1alpha1". Required.
	APIVersion string `json:"apiVersion"`
	// Kind is the object's kind, e.g. "Fleet". Required.
	Kind string `json:"kind"`
}

// ObjectMeta is the metadata every stored object has.
type ObjectMeta struct {
	// Name identifies the object within its kind. A DNS label: lower-case letters, digits and '-',
	// starting with a letter, at most 63 characters. Required.
	Name string `json:"name"`
	// Labels are free-form key/value pairs. Default: none.
	Labels map[string]string `json:"labels,omitempty"`
	// ResourceVersion is set by the store on every write and used for optimistic concurrency.
	// Read-only; ignored on apply.
	ResourceVersion int64 `json:"resourceVersion,omitempty"`
	// Generation counts changes to the spec. Read-only; set by the control plane.
	Generation int64 `json:"generation,omitempty"`
	// CreationTimestamp is when the object was first stored. Read-only.
	CreationTimestamp *time.Time `json:"creationTimestamp,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("10s", "1m30s").
type Duration struct {
	time.Duration
}

// D is shorthand for building a Duration.
func D(d time.Duration) Duration { return Duration{d} }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.Duration.String())
}

// UnmarshalJSON reads a duration string such as "500ms" or "2s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"5s\" or \"500ms\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: use a number with a unit, such as \"5s\" or \"500ms\"", s)
	}
	d.Duration = v
	return nil
}

// GetMeta gives generic code (the store's typed helpers) access to an object's metadata.
func (f *Fleet) GetMeta() *ObjectMeta { return &f.Metadata }

// GetMeta gives generic code access to an object's metadata.
func (i *Instance) GetMeta() *ObjectMeta { return &i.Metadata }

// GetMeta gives generic code access to an object's metadata.
func (e *Event) GetMeta() *ObjectMeta { return &e.Metadata }

// GetMeta gives generic code access to an object's metadata.
func (n *NodeImage) GetMeta() *ObjectMeta { return &n.Metadata }
