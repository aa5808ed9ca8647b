package controller

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"herd.dev/herd/api/v1alpha1"
)

// instanceTemplate is every part of a fleet's spec that shapes an instance. A change to any of it
// makes a new revision; everything else (replicas, listeners, health checks, rollout) is applied to
// the running instances without replacing them.
type instanceTemplate struct {
	Image string `json:"image"`
}

// RevisionName returns "<fleet>-<hash>" for the fleet's current instance template.
func RevisionName(f *v1alpha1.Fleet) string {
	data, _ := json.Marshal(instanceTemplate{Image: f.Spec.Image})
	sum := sha256.Sum256(data)
	return f.Metadata.Name + "-" + hex.EncodeToString(sum[:])[:8]
}

const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789" // no vowels: no words by accident

// newInstanceName returns "<fleet>-<5 random characters>", not in taken.
func newInstanceName(fleet string, taken map[string]*v1alpha1.Instance) string {
	if len(fleet) > 57 {
		fleet = fleet[:57]
	}
	for {
		b := make([]byte, 5)
		_, _ = rand.Read(b)
		for i := range b {
			b[i] = nameAlphabet[int(b[i])%len(nameAlphabet)]
		}
		name := fleet + "-" + string(b)
		if _, dup := taken[name]; !dup {
			return name
		}
	}
}
