package awstwin

import (
	"maps"
	"net/http"
)

// Backend runs what the twin's instances stand for, for tests that need more than records: a
// RunInstances launches each instance on it, which gives the instance its private address (where
// its agent answers), and a termination, by TerminateInstances or from outside, tears it down.
type Backend interface {
	// Launch starts instance in from its AMI, image, and returns its private address. An error
	// fails RunInstances with InternalError, and no instance is kept. It is called with the
	// twin's lock held: it must not call the twin.
	Launch(in Instance, image Image) (privateIP string, err error)
	// Terminate tears instance in down; it is called once, and must not block the twin.
	Terminate(in Instance)
}

// launchOnBackend launches in on the backend, if the twin has one; the caller holds tw.mu.
func (tw *Twin) launchOnBackend(in *instance) *apiError {
	if tw.opts.Backend == nil {
		return nil
	}
	image := *tw.images[in.ImageID] // RunInstances found it
	image.Tags = maps.Clone(image.Tags)
	ip, err := tw.opts.Backend.Launch(*in, image)
	if err != nil {
		return errorf(http.StatusInternalServerError, "InternalError", "launch %s: %v", in.ID, err)
	}
	in.PrivateIP = ip
	return nil
}

// terminateOnBackend tears in down on the backend once, when it starts shutting down; the caller
// holds tw.mu.
func (tw *Twin) terminateOnBackend(in *instance) {
	if tw.opts.Backend == nil || in.State != StateShuttingDown || tw.tornDown[in.ID] {
		return
	}
	if tw.tornDown == nil {
		tw.tornDown = map[string]bool{}
	}
	tw.tornDown[in.ID] = true
	go tw.opts.Backend.Terminate(*in)
}
