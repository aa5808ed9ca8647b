// Package provider defines how herd's controller creates, finds and deletes instances, whatever
// runs them. One package per backend implements Provider: fake (in memory, for tests and scale),
// local (real one-node Kubernetes clusters in network namespaces on this machine), later docker and
// the clouds. providertest holds the suite every provider must pass.
//
// # Contract
//
// A provider MUST:
//   - make Create idempotent by name: creating a name that exists returns the existing instance and
//     starts nothing new, so a controller that crashed between asking and recording can ask again;
//   - keep the labels given at creation and return them from Get and List, so that a restarted
//     controller can adopt what exists (labels are how herd knows fleet, revision and region);
//   - list every instance it runs for a fleet, including ones created before the provider value was
//     made (a restart of herd up), and including Failed ones;
//   - make Delete idempotent (deleting a missing instance is not an error) and complete: when it
//     returns nil, nothing of the instance is left (processes, addresses, disks, rules);
//   - report State Failed, with a Reason, for an instance that died or can never become ready;
//   - be safe for concurrent use.
//
// A provider SHOULD return from Create quickly (booting continues in the background; Get and List
// report Booting until the instance is Ready) and return errors that say what to fix.
package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/api/v1alpha1"
)

// ErrNotFound is returned by Get for an instance the provider does not have.
var ErrNotFound = errors.New("instance not found")

// State is what a provider knows of an instance.
type State string

// Instance states.
const (
	StateBooting  State = "Booting"  // created; the cluster or workload is not ready yet
	StateReady    State = "Ready"    // the node and every baked workload are ready
	StateFailed   State = "Failed"   // dead or unable to boot; Reason says why
	StateDeleting State = "Deleting" // deletion started and has not finished
)

// InstanceSpec is what the controller asks for.
type InstanceSpec struct {
	// Name is unique across the provider and stable: the controller chooses it before asking, so
	// that asking twice is harmless. A DNS label.
	Name string
	// Labels are kept with the instance and returned by Get and List.
	Labels map[string]string
	// Image is the node image bundle the instance boots from (a digest).
	Image string
	// Region is the region the instance belongs to.
	Region string
	// Options are the region's provider options, as the user wrote them.
	Options map[string]string
}

// Instance is a provider's view of one instance.
type Instance struct {
	Name       string
	Labels     map[string]string
	Image      string
	Region     string
	ProviderID string
	// Address is the instance's IP address, once it has one.
	Address   string
	State     State
	Reason    string
	CreatedAt time.Time
}

// Booting is the view of an instance made from spec that has not reported its state yet: what a
// backend starts from before it looks at how the instance is doing.
func (spec InstanceSpec) Booting(providerID, address string, createdAt time.Time) Instance {
	return Instance{
		Name:       spec.Name,
		Labels:     maps.Clone(spec.Labels),
		Image:      spec.Image,
		Region:     spec.Region,
		ProviderID: providerID,
		Address:    address,
		CreatedAt:  createdAt,
		State:      StateBooting,
	}
}

// ListOptions filters List.
type ListOptions struct {
	// Fleet, when set, keeps only instances labelled with this fleet.
	Fleet string
	// Region, when set, keeps only instances labelled with this region: a region is the unit that
	// fails alone, so the controller lists each region on its own and one that does not answer
	// leaves the others' lists whole.
	Region string
}

// Capabilities tells the controller what a provider can do.
type Capabilities struct {
	// Persistent is true when instances outlive the herd process (the controller must adopt them).
	Persistent bool
	// MaxInstances bounds how many instances this provider can run at once; 0 means no known bound.
	MaxInstances int
	// Imageless is true when instances boot no node image (a simulation): a fleet whose regions
	// all run on such providers may name an image that was never built.
	Imageless bool
}

// Provider runs instances. See the package documentation for the contract.
type Provider interface {
	// Name is the provider's name as regions refer to it, e.g. "local".
	Name() string
	Capabilities() Capabilities
	Create(ctx context.Context, spec InstanceSpec) (Instance, error)
	Get(ctx context.Context, name string) (Instance, error)
	List(ctx context.Context, opts ListOptions) ([]Instance, error)
	Delete(ctx context.Context, name string) error
}

// OptionsValidator MAY be implemented by a provider to check a region's options (Region.Options)
// before any instance is asked for: the API server calls it on apply, so that a bad option is
// refused with its field and the fix and nothing changes, instead of failing every Create later.
// A provider that implements it SHOULD report unknown keys, naming the keys it knows.
type OptionsValidator interface {
	// ValidateOptions returns one error per bad option, each at path.Key(key), where path is the
	// region's options field (e.g. spec.regions[0].options).
	ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList
}

// Notifier MAY be implemented by a provider that learns of changes to its instances on its own
// side (an instance failed, or vanished): the controller then looks at the instance's fleet at once,
// where it would otherwise notice only at its next periodic resync.
type Notifier interface {
	// Notify registers f, called with the fleet label of an instance that changed. f returns at
	// once and never calls back into the provider.
	Notify(f func(fleet string))
}

// KubeAccessor MAY be implemented by a provider whose instances run Kubernetes that herd can
// reach: it gives herd up an administrator's kubeconfig for an instance's API server, which herd
// up uses to read pods' logs and to proxy debug access (`herd logs`, `herd kubectl`). The API
// server is never exposed to users: only herd up holds these credentials. The kubeconfig is a
// secret: callers MUST NOT log or store it.
type KubeAccessor interface {
	// Kubeconfig returns the kubeconfig of instance name, or an error wrapping ErrNotFound for an
	// instance the provider does not have, or ErrNoKubeAccess while its API server is not up yet.
	Kubeconfig(ctx context.Context, name string) ([]byte, error)
}

// ErrNoKubeAccess is returned by KubeAccessor.Kubeconfig for an instance whose API server has
// not come up yet (it is booting), or whose provider cannot reach it.
var ErrNoKubeAccess = errors.New("the instance's Kubernetes API is not reachable yet")

// UnknownOptions returns an error for each key of opts that is not in known (in key order), naming
// the keys provider knows, for OptionsValidator implementations.
func UnknownOptions(path *field.Path, opts map[string]string, provider string, known ...string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if slices.Contains(known, k) {
			continue
		}
		fix := fmt.Sprintf("the %s provider takes no options: remove it", provider)
		if len(known) > 0 {
			fix = fmt.Sprintf("unknown option: the %s provider knows %s; correct the key or remove it", provider, strings.Join(known, ", "))
		}
		errs = append(errs, field.Forbidden(path.Child(k), fix))
	}
	return errs
}

var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// ValidName reports whether name can name an instance: a DNS label of at most 63 characters.
// Providers that build paths or host names from an instance name check it before using one.
func ValidName(name string) bool { return len(name) <= 63 && nameRE.MatchString(name) }

// ValidateSpec checks what every provider needs of a spec; providers call it first in Create.
func ValidateSpec(spec InstanceSpec) error {
	if !ValidName(spec.Name) {
		return fmt.Errorf("instance name %q must be a DNS label of at most 63 characters", spec.Name)
	}
	if spec.Image == "" {
		return fmt.Errorf("instance %s: image is required", spec.Name)
	}
	return nil
}

// Matches reports whether an instance with these labels passes the filter.
func (o ListOptions) Matches(labels map[string]string) bool {
	return (o.Fleet == "" || labels[v1alpha1.LabelFleet] == o.Fleet) &&
		(o.Region == "" || labels[v1alpha1.LabelRegion] == o.Region)
}
