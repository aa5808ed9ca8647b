package apiserver

import (
	"fmt"

	"herd.dev/herd/api/v1alpha1"
)

// hostnameClashes refuses a spec.global.hostname given to two fleets: herd's DNS answers a name
// for one fleet only, and would otherwise answer it for whichever sorts first. fleets are the
// applied ones; stored are those in the store, of which those not applied keep their hostnames.
func hostnameClashes(fleets []v1alpha1.Fleet, stored []*v1alpha1.Fleet) []FieldProblem {
	owner := map[string]int{} // hostname -> 1-based document
	applied := map[string]bool{}
	var problems []FieldProblem
	for i := range fleets {
		f := &fleets[i]
		applied[f.Metadata.Name] = true
		if f.Spec.Global == nil || f.Spec.Global.Hostname == "" {
			continue
		}
		h := f.Spec.Global.Hostname
		if doc, taken := owner[h]; taken && fleets[doc-1].Metadata.Name != f.Metadata.Name {
			problems = append(problems, FieldProblem{Document: i + 1, Field: "spec.global.hostname",
				Message: fmt.Sprintf("%s is also the hostname of fleet %q (document %d of this apply): give each fleet its own hostname", h, fleets[doc-1].Metadata.Name, doc)})
			continue
		}
		owner[h] = i + 1
	}
	for _, o := range stored {
		if applied[o.Metadata.Name] || o.Spec.Global == nil {
			continue // an applied fleet's hostname is the one applied now
		}
		if doc, taken := owner[o.Spec.Global.Hostname]; taken {
			problems = append(problems, FieldProblem{Document: doc, Field: "spec.global.hostname",
				Message: fmt.Sprintf("%s is already the hostname of fleet %q: choose another, or remove it from fleet %q first", o.Spec.Global.Hostname, o.Metadata.Name, o.Metadata.Name)})
		}
	}
	return problems
}
