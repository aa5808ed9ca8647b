package apiserver

import (
	"fmt"
	"strings"

	"herd.dev/herd/api/v1alpha1"
)

// uniqueName is a name herd's DNS answers for one fleet only: a spec.global hostname, or a
// spec.discovery name.
type uniqueName struct {
	field string // the field that holds it
	what  string // what it is to the user: "hostname", "discovery name"
	// of returns the fleet's name, "" when it has none.
	of func(f *v1alpha1.Fleet) string
}

var (
	globalHostname = uniqueName{field: "spec.global.hostname", what: "hostname", of: func(f *v1alpha1.Fleet) string {
		if f.Spec.Global == nil {
			return ""
		}
		return f.Spec.Global.Hostname
	}}
	discoveryName = uniqueName{field: "spec.discovery.name", what: "discovery name", of: func(f *v1alpha1.Fleet) string {
		if !f.Published() {
			return ""
		}
		return f.Spec.Discovery.Name
	}}
)

// hostnameClashes refuses a spec.global.hostname given to two fleets: herd's DNS answers a name
// for one fleet only, and would otherwise answer it for whichever sorts first. fleets are the
// applied ones; stored are those in the store, of which those not applied keep their hostnames.
func hostnameClashes(fleets []v1alpha1.Fleet, stored []*v1alpha1.Fleet) []FieldProblem {
	return globalHostname.clashes(fleets, stored)
}

// discoveryClashes refuses a spec.discovery.name published by two fleets, as hostnameClashes does.
func discoveryClashes(fleets []v1alpha1.Fleet, stored []*v1alpha1.Fleet) []FieldProblem {
	return discoveryName.clashes(fleets, stored)
}

func (u uniqueName) clashes(fleets []v1alpha1.Fleet, stored []*v1alpha1.Fleet) []FieldProblem {
	owner := map[string]int{} // name -> 1-based document
	applied := map[string]bool{}
	var problems []FieldProblem
	for i := range fleets {
		f := &fleets[i]
		applied[f.Metadata.Name] = true
		h := u.of(f)
		if h == "" {
			continue
		}
		if doc, taken := owner[h]; taken && fleets[doc-1].Metadata.Name != f.Metadata.Name {
			problems = append(problems, FieldProblem{Document: i + 1, Field: u.field,
				Message: fmt.Sprintf("%s is also the %s of fleet %q (document %d of this apply): give each fleet its own %s", h, u.what, fleets[doc-1].Metadata.Name, doc, u.what)})
			continue
		}
		owner[h] = i + 1
	}
	for _, o := range stored {
		h := u.of(o)
		if applied[o.Metadata.Name] || h == "" {
			continue // an applied fleet's name is the one applied now
		}
		if doc, taken := owner[h]; taken {
			problems = append(problems, FieldProblem{Document: doc, Field: u.field,
				Message: fmt.Sprintf("%s is already the %s of fleet %q: choose another, or remove it from fleet %q first", h, u.what, o.Metadata.Name, o.Metadata.Name)})
		}
	}
	return problems
}

// claimName is the claim (claims.go) the fleet's name of this kind takes, "" when it has none.
func (u uniqueName) claimName(f *v1alpha1.Fleet) string {
	h := u.of(f)
	if h == "" {
		return ""
	}
	return strings.ReplaceAll(u.what, " ", "-") + "-" + h
}
